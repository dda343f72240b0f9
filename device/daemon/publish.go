package daemon

import (
	"encoding/json"
	"sync/atomic"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"

	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/ota"
)

// publisher sends transitions and progress to MQTT once it is dialled.
type publisher struct {
	m          atomic.Pointer[mqtt.Conn]
	compatible string // the device's, in every status published (docs/contract/mqtt.md)
}

func (p *publisher) Publish(st ota.Status, ev ota.Event) {
	m := p.m.Load()
	if m == nil {
		return
	}
	st.Compatible = p.compatible
	if b, err := json.Marshal(st); err == nil {
		m.PublishStatus(b)
	}
	if ev.Seq == 0 {
		return // a status refresh, not a transition
	}
	if b, err := json.Marshal(ev); err == nil {
		m.PublishEvent(b)
	}
}

func (p *publisher) Progress(pr ota.Progress) {
	if m := p.m.Load(); m != nil {
		if b, err := json.Marshal(pr); err == nil {
			m.PublishProgress(b)
		}
	}
}

// systemdStatus shows the state in `systemctl status otad`, in the words
// `otad status` uses (manual: the reboot is the operator's).
type systemdStatus struct {
	words func(ota.Status) string
}

func (s systemdStatus) Publish(st ota.Status, _ ota.Event) {
	msg := "STATUS=" + s.words(st) + ", booted " + string(st.BootedSlot)
	if st.Target != nil {
		msg += ", installing " + st.Target.Version
	}
	if r := st.LastResult; r != nil {
		msg += ", last: " + string(r.Result)
		if r.Code != "" {
			msg += " (" + string(r.Code) + ")"
		}
	}
	sddaemon.SdNotify(false, msg)
}

func (systemdStatus) Progress(ota.Progress) {}

// StateWords is the state as a person reads it: under reboot.policy =
// "manual" an install past its flip waits for the operator's reboot, so it
// is staged (agent.ForOperator), and reads "staged: reboot to boot slot B".
func StateWords(st ota.Status, manual bool) string {
	if (st.State == ota.Rebooting || st.State == ota.Staged) && manual && st.BootedSlot.Valid() {
		return "staged: reboot to boot slot " + string(st.BootedSlot.Other())
	}
	return string(st.State)
}
