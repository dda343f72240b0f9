package agent

import (
	"fmt"

	"github.com/otad/otad/ota"
)

// boot is the first step of every agent start: what the journal says was
// under way, and which slot came up, decide what happens next.
func (m *machine) boot(ev EvBoot) {
	sameBoot := m.s.BootID == ev.BootID
	m.s.Seq = max(m.s.Seq, m.s.SeqMark) // past seqs refusals used unjournaled
	m.s.BootID, m.s.Booted = ev.BootID, ev.Booted
	if m.stopRetrying() {
		// The retry timer did not outlive the process: the ending stays,
		// retryable (docs/contract/installing.md, the automatic retry).
		m.persist()
	}
	if m.s.Slots == nil {
		m.s.Slots = map[ota.Slot]SlotInfo{}
	}
	if t := m.s.Target; t != nil && t.Drop != "" {
		m.bootDropping() // an operator's drop (undo.go), interrupted
		return
	}
	switch m.s.Phase {
	case ota.Idle:
		m.bootIdle(sameBoot)
	case ota.Downloading, ota.Verifying:
		m.bootWriting()
	case ota.Staged:
		m.bootStaged(ev, sameBoot)
	case ota.Rebooting:
		m.bootRebooting(ev, sameBoot)
	case ota.Confirming:
		if t := m.s.Target; m.s.Booted == t.Slot {
			if t.ConfirmingSince.IsZero() {
				t.ConfirmingSince = ev.Time // journaled by an older otad
			}
			// An older otad journaled no running time: the count starts here.
			t.Confirming = t.Confirming.At(ev.BootID, ev.Uptime)
			m.emit(ota.Confirming, nil, "checking health again after a restart, within what is left of the commit window")
			m.do(StartHealth{Used: t.Confirming.Used(), Since: t.ConfirmingSince})
		} else {
			m.fellBack()
		}
	}
}

func (m *machine) bootIdle(sameBoot bool) {
	booted := m.s.Booted
	if m.s.Slots[booted].Status == ota.SlotBad && m.otherBootable(booted) {
		// A reboot we asked for after a rejection did not happen yet
		// (crash, or the bootloader retried): leave again, never commit it.
		// Within the same boot under the manual policy the operator has not
		// rebooted yet after their mark-bad: the reboot stays theirs.
		m.persist()
		m.do(Mark{Op: MarkBad, Slot: booted})
		if sameBoot && !m.p.RebootImmediately {
			m.emit(ota.Idle, nil, "slot "+string(booted)+" is marked bad; "+rebootToReturn(booted.Other()))
			return
		}
		m.do(Reboot{})
		return
	}
	m.healthyBoot()
	m.emit(ota.Idle, nil, "agent started on slot "+string(booted))
	m.startPending()
}

// bootWriting resumes an install that a crash or power cut interrupted.
func (m *machine) bootWriting() {
	t := m.s.Target
	if t.Slot == m.s.Booted {
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
	m.startInstall(*t, fmt.Sprintf("install interrupted (restart %d); starting again (a chunked payload resumes at its checkpoint)", m.s.Restarts))
}

func (m *machine) bootStaged(ev EvBoot, sameBoot bool) {
	t := m.s.Target
	switch {
	case sameBoot:
		m.activate()
	case ev.Booted == t.Slot:
		m.confirm(ev)
	case ev.FirstInOrder != t.Slot:
		// Power was lost between journaling staged and switching the
		// boot slot: the verified image is still there; switch now.
		m.healthyBoot()
		m.activate()
	default:
		m.fellBack()
	}
}

func (m *machine) bootRebooting(ev EvBoot, sameBoot bool) {
	t := m.s.Target
	switch {
	case sameBoot:
		m.emit(ota.Rebooting, nil, "agent restarted; waiting for the reboot into slot "+string(t.Slot))
		if m.p.RebootImmediately {
			m.do(Reboot{})
		}
	case m.s.Booted == t.Slot:
		m.confirm(ev)
	default:
		m.fellBack()
	}
}

// confirm starts the commit window: the first start on the new slot.
func (m *machine) confirm(ev EvBoot) {
	m.s.Target.ConfirmingSince = ev.Time
	m.s.Target.Confirming = RunTime{Boot: ev.BootID, From: ev.Uptime, Seen: ev.Uptime}
	m.transition(ota.Confirming, nil, "booted the new slot")
	m.do(StartHealth{Since: ev.Time})
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
