package agent

import (
	"time"

	"github.com/otad/otad/ota"
)

// Policy is the part of the configuration the state machine decides with.
type Policy struct {
	RebootImmediately bool
	// MaxRestarts bounds how often an interrupted install starts again
	// before it is given up (a device that OOMs on every try must settle).
	MaxRestarts int
	// RetryAttempts bounds the automatic retries of a download that failed
	// ([retry] attempts, docs/contract/installing.md); after them only an
	// explicit act starts the offer again.
	RetryAttempts int
}

// Step applies ev to s and returns the new state and what the loop must do.
// It never performs I/O and never reads the clock: now is the wall clock's
// time of the event, which the machine only records (when an offer ended),
// never decides by.
func Step(s State, p Policy, now time.Time, ev Event) (State, []Effect) {
	m := &machine{s: s.Clone(), p: p, now: now}
	m.step(ev)
	return m.s, m.fx
}

type machine struct {
	s   State
	p   Policy
	now time.Time
	fx  []Effect
}

func (m *machine) do(e ...Effect) { m.fx = append(m.fx, e...) }

func (m *machine) persist() { m.do(Persist{State: m.s.Clone()}) }

// emit records a transition. The seq grows and is journaled before anything
// is published, so seq only ever grows, across restarts too.
func (m *machine) emit(from ota.Phase, r *ota.Outcome, msg string) {
	m.s.Seq++
	m.persist()
	ev := ota.Event{Seq: m.s.Seq, From: from, To: m.s.Phase, Message: msg}
	switch {
	case r != nil:
		ev.ID, ev.SHA256, ev.Result, ev.Code, ev.Transfer, ev.Retryable = r.ID, r.SHA256, r.Result, r.Code, r.Transfer, r.Retryable
		if r.Message != "" {
			ev.Message = r.Message
		}
	case m.s.Target != nil:
		ev.ID, ev.SHA256, ev.Transfer = m.s.Target.ID, m.s.Target.SHA256(), m.s.Target.Transfer
	}
	m.do(Emit{Event: ev, State: m.s.Clone()})
}

// transition persists the new phase, then announces it.
func (m *machine) transition(to ota.Phase, r *ota.Outcome, msg string) {
	from := m.s.Phase
	m.s.Phase = to
	if r != nil {
		m.s.LastResult = r
	}
	m.emit(from, r, msg)
}

func (m *machine) step(ev Event) {
	switch ev := ev.(type) {
	case EvBoot:
		m.boot(ev)
	case EvOffer:
		m.offer(ev.Target, ev.Local)
	case EvPendingOffer:
		m.s.Pending = nil
		m.offer(ev.Target, false)
	case EvRetry:
		m.retry(ev)
	case EvCancel:
		m.cancel()
	case EvMarkActive:
		m.markActive(ev.Other)
	case EvRefused:
		m.refused(ev)
	case EvProgress:
		m.progress(ev)
	case EvInstallDone:
		m.installDone(ev)
	case EvHealth:
		if m.s.Phase != ota.Confirming {
			return
		}
		if ev.OK {
			m.commit("health checks passed")
		} else {
			m.reject(ota.CodeHealthCheckFailed, "health check failed: "+ev.Message, true)
		}
	case EvMarkGood:
		if m.s.Phase == ota.Confirming {
			m.commit("marked good by operator")
			return
		}
		info := m.s.Slots[m.s.Booted]
		info.Status = ota.SlotGood
		m.s.Slots[m.s.Booted] = info
		m.do(Mark{Op: MarkGood, Slot: m.s.Booted})
		m.emit(m.s.Phase, nil, "slot "+string(m.s.Booted)+" marked good by operator")
	case EvRunning:
		if t := m.s.Target; m.s.Phase == ota.Confirming && t != nil {
			t.Confirming = t.Confirming.At(m.s.BootID, ev.Uptime)
			m.persist()
		}
	case EvMarkBad:
		m.markBad()
	case EvEffectFailed:
		m.effectFailed(ev)
	}
}

// result is t's outcome; t has ended for good.
func (m *machine) result(t *Target, result ota.Result, code ota.Code, msg string) *ota.Outcome {
	return m.ending(t, result, code, msg, false)
}

// ending is t's outcome; a retryable one may start again, but only by an
// explicit act or the agent's bounded retries (retry.go).
func (m *machine) ending(t *Target, result ota.Result, code ota.Code, msg string, retryable bool) *ota.Outcome {
	m.recordEnd(t, result, retryable)
	return &ota.Outcome{ID: t.ID, SHA256: t.SHA256(), ManifestSHA256: t.ManifestSHA256, IssuedAt: t.IssuedAt, Result: result, Code: code, Message: msg, Transfer: t.Transfer, Retryable: retryable, Time: m.now}
}

func (m *machine) startInstall(t Target, msg string) {
	slot := m.s.Booted.Other()
	t.Slot = slot
	t.BytesDone, t.Transfer, t.ConfirmingSince, t.Confirming = 0, ota.Transfer{}, time.Time{}, RunTime{}
	// The envelope stays with the install: its signatures are checked
	// again before the flip (TrustChecker).
	m.s.Target = &t
	m.stopRetrying() // the retry itself, or an install in its place
	m.s.InstallGen++
	early := false
	if prev := m.s.Slots[slot]; prev.SHA256 != "" && prev.Status != ota.SlotBad {
		// The slot holds an image the bootloader may still boot (one an
		// operator dropped, or the last release): it hears first that it
		// is bad, so it never boots an image the journal no longer names.
		m.do(Mark{Op: MarkBad, Slot: slot})
		early = true
	}
	// The journal forgets the slot's contents before the first byte is written
	// and the bootloader is told it is bad: a half-written slot never boots.
	m.s.Slots[slot] = SlotInfo{}
	m.transition(ota.Downloading, nil, msg)
	if !early {
		m.do(Mark{Op: MarkBad, Slot: slot})
	}
	m.do(StartInstall{Gen: m.s.InstallGen, Target: t, Booted: m.s.Slots[m.s.Booted]})
}

func (m *machine) progress(ev EvProgress) {
	t := m.s.Target
	if ev.Gen != m.s.InstallGen || t == nil || (m.s.Phase != ota.Downloading && m.s.Phase != ota.Verifying) {
		return
	}
	t.BytesDone, t.Transfer = ev.BytesDone, ev.Transfer
	if ev.Phase == ota.Verifying && m.s.Phase == ota.Downloading {
		m.transition(ota.Verifying, nil, "")
	}
	m.do(PublishProgress{Target: *t, Progress: ev.Progress})
}

func (m *machine) installDone(ev EvInstallDone) {
	t := m.s.Target
	if ev.Gen != m.s.InstallGen || t == nil || (m.s.Phase != ota.Downloading && m.s.Phase != ota.Verifying) {
		return // a late report from a writer that was cancelled
	}
	m.s.Restarts = 0
	t.Transfer = ev.Transfer
	if ev.Code != "" {
		m.failed(t, ev.Code, ev.Message)
		return
	}
	t.BytesDone = t.Payload.Size
	m.s.Slots[t.Slot] = SlotInfo{ID: t.ID, Version: t.Version, SHA256: t.SHA256(), SecurityVersion: t.SecurityVersion, Status: ota.SlotStaged, Envelope: t.Envelope}
	m.transition(ota.Staged, nil, "image written and verified in slot "+string(t.Slot))
	m.activate()
}

// activate flips the boot slot, then reboots per policy.
func (m *machine) activate() {
	t := m.s.Target
	m.do(Mark{Op: MarkActive, Slot: t.Slot})
	m.transition(ota.Rebooting, nil, "slot "+string(t.Slot)+" is primary")
	if m.p.RebootImmediately {
		m.do(Reboot{})
	}
}
