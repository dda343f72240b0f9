package agent

import (
	"fmt"

	"github.com/otad/otad/ota"
)

// Policy is the part of the configuration the state machine decides with.
type Policy struct {
	RebootImmediately bool
	// MaxRestarts bounds how often an interrupted install starts again
	// before it is given up (a device that OOMs on every try must settle).
	MaxRestarts int
}

// Event is an input to Step.
type Event interface{ isEvent() }

// EvBoot is the first event of every agent start: which slot runs and which boot this is.
type EvBoot struct {
	Booted ota.Slot
	BootID string
	// FirstInOrder is the slot the bootloader's order names first, read
	// before the event when it matters (a journal left in staged).
	FirstInOrder ota.Slot
}

// EvOffer is an offer that passed every check of SPEC §5.
type EvOffer struct{ Target Target }

// EvRefused is an offer that failed a check. Outcome names the offer when
// it is authentic, and says why it was refused.
type EvRefused struct{ Outcome ota.Outcome }

// EvProgress reports the writer's progress; Phase "verifying" moves the state on.
type EvProgress struct {
	Gen              uint64
	Verifying        bool
	BytesDone, Total int64
}

// EvInstallDone ends a write: Code is empty on success.
type EvInstallDone struct {
	Gen     uint64
	Code    ota.Code
	Message string
}

// EvHealth is the health check's verdict during confirming.
type EvHealth struct {
	OK      bool
	Message string
}

// EvMarkGood and EvMarkBad are the operator's manual commit and rollback.
type (
	EvMarkGood struct{}
	EvMarkBad  struct{}
)

// EvEffectFailed reports that a bootloader effect could not be carried out.
type EvEffectFailed struct {
	Effect  Effect
	Message string
}

func (EvBoot) isEvent()         {}
func (EvOffer) isEvent()        {}
func (EvRefused) isEvent()      {}
func (EvProgress) isEvent()     {}
func (EvInstallDone) isEvent()  {}
func (EvHealth) isEvent()       {}
func (EvMarkGood) isEvent()     {}
func (EvMarkBad) isEvent()      {}
func (EvEffectFailed) isEvent() {}

// Effect is an instruction to the loop. Effects run in order; the first that
// fails stops the rest of its batch and comes back as EvEffectFailed.
type Effect interface{ isEffect() }

// Persist writes the journal; the loop stops (and the process exits) if it cannot.
type Persist struct{ State State }

// Emit publishes a transition: the status snapshot of State, and Event,
// which the loop stamps with device, boot and time (Step reads no clock).
type Emit struct {
	Event ota.Event
	State State // the state after the transition
}

// Mark changes the bootloader's view of a slot.
type Mark struct {
	Op   MarkOp
	Slot ota.Slot
}

// MarkOp is one of the three bootloader operations of SPEC §7.
type MarkOp string

const (
	MarkBad    MarkOp = "bad"
	MarkActive MarkOp = "active"
	MarkGood   MarkOp = "good"
)

// StartInstall starts the streaming writer for Target into Target.Slot.
type StartInstall struct {
	Gen    uint64
	Target Target
}

// CancelInstall stops the running writer and waits for it to stop.
type CancelInstall struct{}

// Reboot reboots the device.
type Reboot struct{}

// StartHealth runs the health checks within the commit window.
type StartHealth struct{}

// PublishProgress reports bytes done (not journaled).
type PublishProgress struct {
	Target           Target
	BytesDone, Total int64
}

func (Persist) isEffect()         {}
func (Emit) isEffect()            {}
func (Mark) isEffect()            {}
func (StartInstall) isEffect()    {}
func (CancelInstall) isEffect()   {}
func (Reboot) isEffect()          {}
func (StartHealth) isEffect()     {}
func (PublishProgress) isEffect() {}

// Step applies ev to s and returns the new state and what the loop must do.
// It never performs I/O and never reads the clock.
func Step(s State, p Policy, ev Event) (State, []Effect) {
	m := &machine{s: s.Clone(), p: p}
	m.step(ev)
	return m.s, m.fx
}

type machine struct {
	s  State
	p  Policy
	fx []Effect
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
		ev.ID, ev.SHA256, ev.Result, ev.Code = r.ID, r.SHA256, r.Result, r.Code
		if r.Message != "" {
			ev.Message = r.Message
		}
	case m.s.Target != nil:
		ev.ID, ev.SHA256 = m.s.Target.ID, m.s.Target.SHA256()
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
		m.offer(ev.Target)
	case EvRefused:
		r := ev.Outcome
		r.Result = ota.ResultRejected
		m.s.LastResult = &r
		m.emit(m.s.Phase, &r, "")
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
			m.reject(ota.CodeHealthCheckFailed, "health check failed: "+ev.Message)
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
	case EvMarkBad:
		m.markBad()
	case EvEffectFailed:
		m.effectFailed(ev)
	}
}

func (m *machine) boot(ev EvBoot) {
	sameBoot := m.s.BootID == ev.BootID
	m.s.BootID, m.s.Booted = ev.BootID, ev.Booted
	if m.s.Slots == nil {
		m.s.Slots = map[ota.Slot]SlotInfo{}
	}
	t := m.s.Target
	switch m.s.Phase {
	case ota.Idle:
		if m.s.Slots[ev.Booted].Status == ota.SlotBad && m.otherBootable(ev.Booted) {
			// A reboot we asked for after a rejection did not happen yet
			// (crash, or the bootloader retried): leave again, never commit it.
			m.persist()
			m.do(Mark{Op: MarkBad, Slot: ev.Booted}, Reboot{})
			return
		}
		m.healthyBoot()
		m.emit(ota.Idle, nil, "agent started on slot "+string(ev.Booted))
		if m.s.Pending != nil {
			p := *m.s.Pending
			m.s.Pending = nil
			m.offer(p)
		}
	case ota.Downloading, ota.Verifying:
		if t.Slot == ev.Booted {
			// Cannot happen with a sane bootloader (the slot is marked bad before
			// the first byte), but never write the running slot.
			m.s.Target = nil
			m.transition(ota.Idle, m.result(t, ota.ResultFailed, ota.CodeCancelled, "booted into the slot being written; install abandoned"), "")
			return
		}
		m.s.Restarts++
		if m.s.Restarts > m.p.MaxRestarts {
			m.s.Target, m.s.Restarts = nil, 0
			m.transition(ota.Idle, m.result(t, ota.ResultFailed, ota.CodeCancelled,
				fmt.Sprintf("install interrupted %d times; giving up", m.p.MaxRestarts+1)), "")
			m.healthyBoot()
			return
		}
		m.healthyBoot()
		m.startInstall(*t, fmt.Sprintf("install interrupted (restart %d); writing again from the start", m.s.Restarts))
	case ota.Staged:
		switch {
		case sameBoot:
			m.activate()
		case ev.Booted == t.Slot:
			m.transition(ota.Confirming, nil, "booted the new slot")
			m.do(StartHealth{})
		case ev.FirstInOrder != t.Slot:
			// Power was lost between journaling staged and switching the
			// boot slot: the verified image is still there; switch now.
			m.healthyBoot()
			m.activate()
		default:
			m.fellBack()
		}
	case ota.Rebooting:
		switch {
		case sameBoot:
			m.emit(ota.Rebooting, nil, "agent restarted; waiting for the reboot into slot "+string(t.Slot))
			if m.p.RebootImmediately {
				m.do(Reboot{})
			}
		case ev.Booted == t.Slot:
			m.transition(ota.Confirming, nil, "booted the new slot")
			m.do(StartHealth{})
		default:
			m.fellBack()
		}
	case ota.Confirming:
		if ev.Booted == t.Slot {
			m.emit(ota.Confirming, nil, "checking health again after a restart")
			m.do(StartHealth{})
		} else {
			m.fellBack()
		}
	}
}

// healthyBoot marks the running slot good, as every healthy boot does: the
// bootloader counts attempts down on each boot.
//
// A slot the journal holds bad is marked bad again: the mark that rejected
// it may have been lost to a power cut after the journal was written.
func (m *machine) healthyBoot() {
	info := m.s.Slots[m.s.Booted]
	if info.Status == ota.SlotUnknown {
		// The slot the device came with: it booted, so it is good.
		info.Status = ota.SlotGood
		m.s.Slots[m.s.Booted] = info
	}
	m.persist()
	m.do(Mark{Op: MarkGood, Slot: m.s.Booted})
	if other := m.s.Booted.Other(); m.s.Slots[other].Status == ota.SlotBad {
		m.do(Mark{Op: MarkBad, Slot: other})
	}
}

func (m *machine) otherBootable(slot ota.Slot) bool {
	st := m.s.Slots[slot.Other()].Status
	return st == ota.SlotGood || st == ota.SlotStaged
}

func (m *machine) result(t *Target, result ota.Result, code ota.Code, msg string) *ota.Outcome {
	return &ota.Outcome{ID: t.ID, SHA256: t.SHA256(), IssuedAt: t.IssuedAt, Result: result, Code: code, Message: msg}
}

func (m *machine) newest(t Target) {
	if t.IssuedAt.After(m.s.NewestIssuedAt) {
		m.s.NewestIssuedAt = t.IssuedAt
	}
}

func (m *machine) offer(t Target) {
	sha := t.SHA256()
	booted := m.s.Slots[m.s.Booted]
	cur := m.s.Target
	m.newest(t)
	switch {
	case cur != nil && cur.SHA256() == sha:
		// The install in progress already converges there: nothing changes.
		if m.s.Pending != nil && !m.s.Pending.IssuedAt.After(t.IssuedAt) {
			m.s.Pending = nil // the desired state went back to this image
		}
		m.emit(m.s.Phase, nil, "offer "+t.ID+" is the install in progress")
		return
	case m.s.Pending != nil && m.s.Pending.SHA256() == sha:
		m.emit(m.s.Phase, nil, "offer "+t.ID+" is already pending")
		return
	case m.finished(t):
		// The same image was tried and failed; only a newer offer tries again.
		m.emit(m.s.Phase, nil, "offer "+t.ID+" already ended "+string(m.s.LastResult.Result))
		return
	}
	switch m.s.Phase {
	case ota.Idle:
		if booted.Status == ota.SlotGood && booted.SHA256 == sha {
			m.s.Pending = nil
			m.transition(ota.Idle, m.result(&t, ota.ResultUpToDate, "", "slot "+string(m.s.Booted)+" already runs this image"), "")
			return
		}
		m.s.Restarts = 0
		m.startInstall(t, "")
	case ota.Downloading, ota.Verifying:
		// Nothing is flipped yet: the newer offer preempts.
		m.do(CancelInstall{})
		old := m.result(cur, ota.ResultSuperseded, "", "superseded by "+t.ID)
		m.s.LastResult = old
		m.emit(m.s.Phase, old, "")
		m.s.Target = nil
		if booted.Status == ota.SlotGood && booted.SHA256 == sha {
			m.transition(ota.Idle, m.result(&t, ota.ResultUpToDate, "", "slot "+string(m.s.Booted)+" already runs this image"), "")
			return
		}
		m.s.Restarts = 0
		m.startInstall(t, "")
	default:
		// From staged on the boot env has changed: nothing preempts. The newest
		// offer waits, and replaces any older one waiting.
		m.s.Pending = &t
		m.emit(m.s.Phase, nil, "offer "+t.ID+" waits until "+cur.ID+" is settled")
	}
}

// finished reports whether t is the offer the agent last finished with; a
// duplicate delivery of it (retained MQTT message, retry) changes nothing:
// a failure is final for that offer, and a success stays reported as such.
func (m *machine) finished(t Target) bool {
	r := m.s.LastResult
	if r == nil || r.SHA256 != t.SHA256() || t.IssuedAt.After(r.IssuedAt) {
		return false
	}
	switch r.Result {
	case ota.ResultFailed, ota.ResultRolledBack:
		return true
	case ota.ResultSuccess, ota.ResultUpToDate:
		b := m.s.Slots[m.s.Booted]
		return b.Status == ota.SlotGood && b.SHA256 == t.SHA256()
	}
	return false
}

func (m *machine) startInstall(t Target, msg string) {
	slot := m.s.Booted.Other()
	t.Slot = slot
	t.BytesDone = 0
	m.s.Target = &t
	m.s.InstallGen++
	// The journal forgets the slot's contents before the first byte is written
	// and the bootloader is told it is bad: a half-written slot never boots.
	m.s.Slots[slot] = SlotInfo{}
	m.transition(ota.Downloading, nil, msg)
	m.do(Mark{Op: MarkBad, Slot: slot}, StartInstall{Gen: m.s.InstallGen, Target: t})
}

func (m *machine) progress(ev EvProgress) {
	t := m.s.Target
	if ev.Gen != m.s.InstallGen || t == nil || (m.s.Phase != ota.Downloading && m.s.Phase != ota.Verifying) {
		return
	}
	t.BytesDone = ev.BytesDone
	if ev.Verifying && m.s.Phase == ota.Downloading {
		m.transition(ota.Verifying, nil, "")
	}
	m.do(PublishProgress{Target: *t, BytesDone: ev.BytesDone, Total: ev.Total})
}

func (m *machine) installDone(ev EvInstallDone) {
	t := m.s.Target
	if ev.Gen != m.s.InstallGen || t == nil || (m.s.Phase != ota.Downloading && m.s.Phase != ota.Verifying) {
		return // a late report from a writer that was cancelled
	}
	m.s.Restarts = 0
	if ev.Code != "" {
		m.s.Target = nil
		m.transition(ota.Idle, m.result(t, ota.ResultFailed, ev.Code, ev.Message), "")
		return
	}
	t.BytesDone = t.Payload.Size
	m.s.Slots[t.Slot] = SlotInfo{ID: t.ID, Version: t.Version, SHA256: t.SHA256(), SecurityVersion: t.SecurityVersion, Status: ota.SlotStaged}
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

func (m *machine) commit(msg string) {
	t := m.s.Target
	m.do(Mark{Op: MarkGood, Slot: t.Slot})
	m.s.Slots[t.Slot] = SlotInfo{ID: t.ID, Version: t.Version, SHA256: t.SHA256(), SecurityVersion: t.SecurityVersion, Status: ota.SlotGood}
	if t.SecurityVersion > m.s.SecurityFloor {
		m.s.SecurityFloor = t.SecurityVersion
	}
	m.s.Target = nil
	m.transition(ota.Idle, m.result(t, ota.ResultSuccess, "", msg), "")
	m.startPending()
}

// reject gives up the running new slot and goes back to the other one.
func (m *machine) reject(code ota.Code, msg string) {
	t := m.s.Target
	m.do(Mark{Op: MarkBad, Slot: t.Slot})
	info := m.s.Slots[t.Slot]
	info.Status = ota.SlotBad
	m.s.Slots[t.Slot] = info
	m.s.Target = nil
	m.transition(ota.Idle, m.result(t, ota.ResultFailed, code, msg), "")
	// Back to the old slot regardless of the reboot policy: this one is bad.
	m.do(Reboot{})
}

// fellBack handles a boot that did not reach the target: the bootloader
// gave up on it. The bootloader hears it first, so that no power cut can
// leave a journal that says "rolled back" over an env that might still try
// the new slot.
func (m *machine) fellBack() {
	t := m.s.Target
	m.do(Mark{Op: MarkBad, Slot: t.Slot}, Mark{Op: MarkGood, Slot: m.s.Booted})
	info := m.s.Slots[t.Slot]
	info.Status = ota.SlotBad
	m.s.Slots[t.Slot] = info
	m.s.Target = nil
	m.transition(ota.Idle, m.result(t, ota.ResultRolledBack, ota.CodeRolledBackByBootloader,
		fmt.Sprintf("booted slot %s, not the new slot %s: the bootloader fell back", m.s.Booted, t.Slot)), "")
	m.startPending()
}

func (m *machine) startPending() {
	if m.s.Pending == nil {
		return
	}
	p := *m.s.Pending
	m.s.Pending = nil
	m.offer(p)
}

// CanMarkBad says whether the operator may reject the booted slot now:
// only with a good image in the other slot to return to, and not mid-install.
func CanMarkBad(s State) error {
	switch {
	case s.Phase == ota.Confirming:
		return nil
	case s.Phase != ota.Idle:
		return fmt.Errorf("mark-bad refused: an install is %s; wait for it to settle", s.Phase)
	}
	st := s.Slots[s.Booted.Other()].Status
	if st != ota.SlotGood && st != ota.SlotStaged {
		return fmt.Errorf("mark-bad refused: slot %s holds no good image to return to", s.Booted.Other())
	}
	return nil
}

func (m *machine) markBad() {
	if m.s.Phase == ota.Confirming {
		m.reject(ota.CodeCancelled, "marked bad by operator")
		return
	}
	if err := CanMarkBad(m.s); err != nil {
		m.emit(m.s.Phase, nil, err.Error())
		return
	}
	slot := m.s.Booted
	info := m.s.Slots[slot]
	info.Status = ota.SlotBad
	m.s.Slots[slot] = info
	m.do(Mark{Op: MarkBad, Slot: slot}, Mark{Op: MarkActive, Slot: slot.Other()})
	m.transition(ota.Idle, &ota.Outcome{ID: info.ID, SHA256: info.SHA256, Result: ota.ResultRolledBack, Code: ota.CodeCancelled,
		Message: "slot " + string(slot) + " marked bad by operator"}, "")
	m.do(Reboot{})
}

// effectFailed runs on the state as last journaled: the loop rolls its
// memory back to the journal when an effect fails, so memory equals disk.
func (m *machine) effectFailed(ev EvEffectFailed) {
	t := m.s.Target
	switch m.s.Phase {
	case ota.Downloading, ota.Verifying:
		// Marking the slot bad failed: never write a slot that could boot.
		m.s.Target = nil
		m.do(CancelInstall{})
		m.transition(ota.Idle, m.result(t, ota.ResultFailed, ota.CodeWriteFailed, ev.Message), "")
	case ota.Staged, ota.Rebooting:
		// The flip did not happen: the old slot stays primary.
		info := m.s.Slots[t.Slot]
		info.Status = ota.SlotBad
		m.s.Slots[t.Slot] = info
		m.s.Target = nil
		m.transition(ota.Idle, m.result(t, ota.ResultFailed, ota.CodeWriteFailed, ev.Message), "")
		m.do(Mark{Op: MarkBad, Slot: t.Slot})
	case ota.Confirming:
		// Neither commit nor rejection reached the bootloader. Rebooting keeps
		// the new slot counting down its attempts until the bootloader falls back.
		m.emit(ota.Confirming, nil, ev.Message+"; rebooting so the bootloader decides")
		m.do(Reboot{})
	default:
		m.emit(m.s.Phase, nil, ev.Message)
	}
}
