package agent

import (
	"time"

	"github.com/otad/otad/ota"
)

// Snapshot renders a State as the status snapshot.
func Snapshot(device, agentVersion string, s State, now time.Time) ota.Status {
	st := ota.Status{
		Device: device, Seq: s.Seq, BootID: s.BootID, State: s.Phase, BootedSlot: s.Booted,
		Slots: map[ota.Slot]ota.SlotStatus{}, AgentVersion: agentVersion, Time: now.UTC(),
	}
	if st.State == "" {
		st.State = ota.Idle
	}
	for _, name := range ota.Slots() {
		si := s.Slots[name]
		st.Slots[name] = ota.SlotStatus{Version: si.Version, SHA256: si.SHA256, SecurityVersion: si.SecurityVersion, Status: si.Status}
	}
	if t := s.Target; t != nil {
		st.Target = targetStatus(t)
	}
	if p := s.Pending; p != nil {
		st.Pending = targetStatus(p)
	}
	if r := s.LastResult; r != nil {
		lr := *r
		lr.IssuedAt = time.Time{} // the journal's, for telling redeliveries apart
		st.LastResult = &lr
	}
	if r := s.LastRefusal; r != nil {
		lr := *r
		st.LastRefusal = &lr
	}
	return st
}

func targetStatus(t *Target) *ota.TargetStatus {
	return &ota.TargetStatus{ID: t.ID, Version: t.Version, SHA256: t.SHA256(), ManifestSHA256: t.ManifestSHA256, BytesDone: t.BytesDone, BytesTotal: t.Payload.Size, Transfer: t.Transfer,
		ConfirmingSince: t.ConfirmingSince}
}

// WithWindowLeft adds to st, in confirming, what is left of the commit
// window of rt (the target's running time), read at uptime in boot: an
// operator told to wait for the window sees how long.
func WithWindowLeft(st ota.Status, rt RunTime, window time.Duration, boot string, uptime time.Duration) ota.Status {
	if st.State != ota.Confirming || st.Target == nil {
		return st
	}
	left := max(0, window-rt.At(boot, uptime).Used()).Milliseconds()
	t := *st.Target // snapshots handed out share the old pointer
	t.WindowLeftMS = &left
	st.Target = &t
	return st
}

// ForOperator is the status as the operator reads it under the manual
// reboot policy: an install past its flip waits for their reboot, so it is
// staged, not rebooting (which the device is not doing).
func ForOperator(st ota.Status, p Policy) ota.Status {
	if !p.RebootImmediately && st.State == ota.Rebooting {
		st.State = ota.Staged
	}
	return st
}

// forOperatorEvent says a transition in the same words.
func forOperatorEvent(ev ota.Event, p Policy) ota.Event {
	if !p.RebootImmediately {
		if ev.From == ota.Rebooting {
			ev.From = ota.Staged
		}
		if ev.To == ota.Rebooting {
			ev.To = ota.Staged
		}
	}
	return ev
}
