package agent

import (
	"fmt"

	"github.com/otad/otad/ota"
)

// The operator's undo (docs/contract/commands.md): otad cancel stops an
// install before its flip; otad mark-active booted drops one past it, as
// RAUC's `rauc status mark-active booted` does; mark-active other switches to
// the other slot's verified image. Each refuses with the reason otherwise.

// CanCancel says whether otad cancel has something to stop.
func CanCancel(s State) error {
	switch s.Phase {
	case ota.Downloading, ota.Verifying:
		return nil
	case ota.Staged, ota.Rebooting:
		return fmt.Errorf("cancel refused: %s is written and verified in slot %s; otad mark-active booted drops it", s.Target.ID, s.Target.Slot)
	case ota.Confirming:
		return fmt.Errorf("cancel refused: slot %s runs %s and awaits its health check; otad mark-bad rejects it", s.Target.Slot, s.Target.ID)
	}
	return fmt.Errorf("cancel refused: no install is running")
}

// cancel stops the running install: the slot being written stays marked
// bad as it was from the first byte, the boot slot never changed, and the
// ending is retryable.
func (m *machine) cancel() {
	if err := CanCancel(m.s); err != nil {
		m.emit(m.s.Phase, nil, err.Error())
		return
	}
	t := m.s.Target
	m.do(CancelInstall{})
	m.s.Target, m.s.Restarts = nil, 0
	m.transition(ota.Idle, m.ending(t, ota.ResultFailed, ota.CodeCancelled,
		"cancelled by operator; slot "+string(t.Slot)+" stays unbootable, the boot slot did not change; otad install of the same offer starts it again", true), "")
}

// CanMarkActive says whether otad mark-active booted (other false) or other
// may act now, under policy p.
func CanMarkActive(s State, p Policy, other bool) error {
	if !other {
		switch s.Phase {
		case ota.Staged, ota.Rebooting:
			return nil
		case ota.Downloading, ota.Verifying:
			return fmt.Errorf("mark-active booted refused: slot %s is active; an install is %s (otad cancel stops it)", s.Booted, s.Phase)
		case ota.Confirming:
			return fmt.Errorf("mark-active booted refused: slot %s is booted and awaits its health check; otad mark-good commits it, otad mark-bad rejects it", s.Booted)
		}
		return fmt.Errorf("mark-active booted refused: slot %s is already active and nothing is staged", s.Booted)
	}
	o := s.Booted.Other()
	info := s.Slots[o]
	switch {
	case (s.Phase == ota.Staged || s.Phase == ota.Rebooting) && !p.RebootImmediately && s.Target != nil:
		// Under the manual policy nothing settles by itself: the status
		// reads staged (docs/contract/installing.md, States), and the
		// operator's reboot or mark-active booted is what moves it.
		return fmt.Errorf("mark-active other refused: %s is staged in slot %s, already primary; reboot to boot it (systemctl reboot), or drop it with otad mark-active booted", s.Target.ID, s.Target.Slot)
	case s.Phase != ota.Idle:
		return fmt.Errorf("mark-active other refused: an install is %s; wait for it to settle", s.Phase)
	case info.SHA256 == "" || (info.Status != ota.SlotGood && info.Status != ota.SlotStaged):
		what := "no verified image"
		if info.Status == ota.SlotBad {
			what = "an image marked bad"
		}
		return fmt.Errorf("mark-active other refused: slot %s holds %s", o, what)
	case info.SecurityVersion < s.SecurityFloor:
		return fmt.Errorf("mark-active other refused: slot %s holds security_version %d, below this device's floor %d", o, info.SecurityVersion, s.SecurityFloor)
	}
	return nil
}

func (m *machine) markActive(other bool) {
	if err := CanMarkActive(m.s, m.p, other); err != nil {
		m.emit(m.s.Phase, nil, err.Error())
		return
	}
	if !other {
		m.dropStaged(false)
		return
	}
	// The other slot's image goes the way of a staged install past its
	// flip: booted, health-checked, committed or rejected.
	o := m.s.Booted.Other()
	info := m.s.Slots[o]
	m.s.Target = &Target{ID: info.ID, Version: info.Version, SecurityVersion: info.SecurityVersion,
		Payload: ota.Payload{SHA256: info.SHA256}, Slot: o, Envelope: info.Envelope}
	m.s.Pending = nil
	m.do(Mark{Op: MarkActive, Slot: o})
	m.transition(ota.Rebooting, nil, "slot "+string(o)+" is primary (otad mark-active other)")
	if m.p.RebootImmediately {
		m.do(Reboot{})
	}
}

// dropStaged makes the booted slot primary again under a staged install.
// mark-active booted keeps the verified image (the ending is retryable, and
// mark-active other boots it); mark-bad (reject) marks it bad, for good.
// The journal hears the drop first (Target.Drop), then the bootloader, then
// the journal the ending: a power cut anywhere between leaves a journal that
// names the drop, and the next start finishes it (finishDrop) — never a
// fallback of the bootloader reported for what the operator did.
func (m *machine) dropStaged(reject bool) {
	m.s.Target.Drop = "mark-active"
	if reject {
		m.s.Target.Drop = "mark-bad"
	}
	m.persist()
	m.finishDrop()
}

// finishDrop carries out the journaled drop of the staged install.
func (m *machine) finishDrop() {
	t := m.s.Target
	reject := t.Drop == "mark-bad"
	home := t.Slot.Other()
	m.do(Mark{Op: MarkActive, Slot: home})
	msg := fmt.Sprintf("dropped by operator (otad mark-active booted): slot %s is primary again; slot %s keeps the verified image (otad mark-active other boots it)", home, t.Slot)
	if p := m.s.Pending; p != nil {
		// startPending below writes that slot at once: promise nothing of it.
		msg = fmt.Sprintf("dropped by operator (otad mark-active booted): slot %s is primary again; the pending %s is taken up and installs into slot %s", home, p.ID, t.Slot)
	}
	if reject {
		info := m.s.Slots[t.Slot]
		info.Status = ota.SlotBad
		m.s.Slots[t.Slot] = info
		m.do(Mark{Op: MarkBad, Slot: t.Slot})
		msg = fmt.Sprintf("marked bad by operator before its reboot: slot %s is primary again", home)
	}
	m.s.Target, m.s.Restarts = nil, 0
	m.transition(ota.Idle, m.ending(t, ota.ResultFailed, ota.CodeCancelled, msg, !reject), "")
	m.startPending()
}

// bootDropping finishes a drop a restart interrupted. On the old slot it
// is done as the operator asked. The dropped slot itself came up only if
// the power went before the bootloader heard the drop: it never runs
// uncommitted, so it is marked bad and left at once, whatever the policy.
func (m *machine) bootDropping() {
	t := m.s.Target
	if m.s.Booted != t.Slot {
		m.healthyBoot()
		m.finishDrop()
		return
	}
	t.Drop = "mark-bad"
	m.finishDrop()
	m.do(Reboot{})
}

// BusyError refuses a request that another install, past its flip, stands
// in the way of (exit 4, docs/contract/commands.md).
type BusyError struct{ Msg string }

func (e *BusyError) Error() string { return e.Msg }

// GivenPayloadBusy refuses otad install --payload while an install past its
// flip is unsettled: the offer would wait as pending and, after the reboot,
// no longer have the file. It names the install and what settles it.
func GivenPayloadBusy(st ota.Status) error {
	var how string
	slot := st.BootedSlot.Other()
	switch st.State {
	case ota.Staged, ota.Rebooting:
		how = "reboot to boot it, or drop it with otad mark-active booted"
	case ota.Confirming:
		how = "otad mark-good commits it, otad mark-bad rejects it"
		slot = st.BootedSlot
	default:
		return nil
	}
	what := "an install"
	if t := st.Target; t != nil {
		what = t.ID
		if t.Version != "" {
			what += " (" + t.Version + ")"
		}
	}
	return &BusyError{Msg: fmt.Sprintf("--payload refused: %s is %s in slot %s; %s, then install again", what, st.State, slot, how)}
}
