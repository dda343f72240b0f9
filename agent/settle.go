package agent

import (
	"fmt"

	"github.com/otad/otad/ota"
)

func (m *machine) commit(msg string) {
	t := m.s.Target
	m.do(Mark{Op: MarkGood, Slot: t.Slot})
	m.s.Slots[t.Slot] = SlotInfo{ID: t.ID, Version: t.Version, SHA256: t.SHA256(), SecurityVersion: t.SecurityVersion, Status: ota.SlotGood, Envelope: t.Envelope}
	if t.SecurityVersion > m.s.SecurityFloor {
		m.s.SecurityFloor = t.SecurityVersion
	}
	m.s.Target = nil
	m.transition(ota.Idle, m.result(t, ota.ResultSuccess, "", msg), "")
	m.startPending()
}

// reject gives up the running new slot and goes back to the other one: at
// once after a failed health check, whatever the reboot policy (this slot is
// bad); by the policy when the operator rejects it.
//
// The journal hears it before the bootloader: a power cut between leaves a
// journal that names the failure, and the next start on the slot marks it
// bad again (bootIdle). The other way round, the next start would find the
// old slot booted and report the bootloader's fallback, not the failure.
func (m *machine) reject(code ota.Code, msg string, reboot bool) {
	t := m.s.Target
	info := m.s.Slots[t.Slot]
	info.Status = ota.SlotBad
	m.s.Slots[t.Slot] = info
	m.s.Target = nil
	if !reboot {
		msg += "; " + rebootToReturn(t.Slot.Other())
	}
	m.transition(ota.Idle, m.result(t, ota.ResultFailed, code, msg), "")
	m.do(Mark{Op: MarkBad, Slot: t.Slot})
	if reboot {
		m.do(Reboot{})
	}
}

// rebootToReturn is what an operator reads when the reboot policy is manual
// and a slot was rejected: the bootloader is set, the reboot is theirs.
func rebootToReturn(slot ota.Slot) string {
	return "reboot.policy is manual: reboot to return to slot " + string(slot)
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

// startPending has the loop check the pending offer again (docs/contract/installing.md) now
// that the install before it is settled; it stays pending until then. An
// offer journaled without its envelope (older otad) is taken as it is.
func (m *machine) startPending() {
	if m.s.Pending == nil {
		return
	}
	if len(m.s.Pending.Envelope) > 0 {
		m.do(RecheckPending{})
		return
	}
	p := *m.s.Pending
	m.s.Pending = nil
	m.offer(p, false)
}

// CanMarkBad says whether the operator may reject the booted slot now:
// only with a good image in the other slot to return to, and not mid-install.
// Under the manual reboot policy an install staged for the operator's
// reboot is theirs to drop too (as mark-active booted does).
func CanMarkBad(s State, p Policy) error {
	switch {
	case s.Phase == ota.Confirming:
		return nil
	case (s.Phase == ota.Rebooting || s.Phase == ota.Staged) && !p.RebootImmediately:
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
		m.reject(ota.CodeCancelled, "marked bad by operator", m.p.RebootImmediately)
		return
	}
	if err := CanMarkBad(m.s, m.p); err != nil {
		m.emit(m.s.Phase, nil, err.Error())
		return
	}
	if m.s.Phase != ota.Idle {
		m.dropStaged(true)
		return
	}
	slot := m.s.Booted
	info := m.s.Slots[slot]
	info.Status = ota.SlotBad
	m.s.Slots[slot] = info
	m.do(Mark{Op: MarkBad, Slot: slot}, Mark{Op: MarkActive, Slot: slot.Other()})
	msg := "slot " + string(slot) + " marked bad by operator"
	if !m.p.RebootImmediately {
		msg += "; " + rebootToReturn(slot.Other())
	}
	m.transition(ota.Idle, &ota.Outcome{ID: info.ID, SHA256: info.SHA256, Result: ota.ResultRolledBack, Code: ota.CodeCancelled, Message: msg}, "")
	if m.p.RebootImmediately {
		m.do(Reboot{})
	}
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
		code := ota.CodeWriteFailed
		if ev.Code != "" {
			code = ev.Code
		}
		m.transition(ota.Idle, m.result(t, ota.ResultFailed, code, ev.Message), "")
		m.do(Mark{Op: MarkBad, Slot: t.Slot})
	case ota.Confirming:
		// Neither commit nor rejection reached the bootloader. Rebooting keeps
		// the new slot counting down its attempts until the bootloader falls back.
		m.emit(ota.Confirming, nil, ev.Message+"; rebooting so the bootloader decides")
		m.do(Reboot{})
	case ota.Idle:
		if mk, ok := ev.Effect.(Mark); ok && mk.Op == MarkBad && mk.Slot == m.s.Booted && m.s.Slots[mk.Slot].Status == ota.SlotBad {
			// A rejection is journaled; the bootloader did not hear it.
			// Rebooting counts the slot's attempts down until it falls back,
			// and each start on it marks it bad again.
			m.emit(ota.Idle, nil, ev.Message+"; rebooting so the bootloader decides")
			m.do(Reboot{})
			return
		}
		m.emit(m.s.Phase, nil, ev.Message)
	default:
		m.emit(m.s.Phase, nil, ev.Message)
	}
}
