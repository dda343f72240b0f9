package fleetview

import (
	"time"

	"github.com/otad/otad/ota"
)

// Device is one device as the view knows it: the row of `otactl status
// --json` (docs/contract/commands.md, whose keys are stable) and of the
// dashboard. Everything in it came from the device, so from outside: a
// printer must escape it.
type Device struct {
	ID string `json:"device"`
	// Online is the presence flag; nil when unknown (never heard, or not
	// understood).
	Online *bool `json:"online"`
	// State is the install phase of the latest status; "" without one.
	State ota.Phase `json:"state"`
	// BadStatus is why the latest status did not decode; "" when it did.
	BadStatus string `json:"bad_status"`
	// Booted is the slot the device runs, Running the version in it.
	Booted  ota.Slot `json:"booted"`
	Running string   `json:"running"`
	// Slots are what each slot holds and whether the agent vouches for it
	// (good, staged, bad, "" unknown).
	Slots       map[ota.Slot]SlotView `json:"slots"`
	Target      *TargetView           `json:"target"`
	LastResult  *ota.Outcome          `json:"last_result"`
	LastRefusal *ota.Refusal          `json:"last_refusal"`
	Groups      []string              `json:"groups"`
	Seq         uint64                `json:"seq"`
	Agent       string                `json:"agent_version"`
	Time        *time.Time            `json:"time"` // the status' own time; nil without a status
	// TrustVersion is the version of its root of trust; 0 without one
	// (docs/contract/trust.md).
	TrustVersion uint64 `json:"trust_version"`
}

// SlotView is one slot of a Device.
type SlotView struct {
	Version string        `json:"version"`
	Status  ota.SlotState `json:"status"`
}

// TargetView is the install in progress, with the freshest byte count (a
// progress report newer than the status wins).
type TargetView struct {
	ID             string `json:"id"`
	ManifestSHA256 string `json:"manifest_sha256,omitempty"` // the offer's identity; "" from an older agent
	Version        string `json:"version"`
	BytesDone      int64  `json:"bytes_done"`
	BytesTotal     int64  `json:"bytes_total"`
}

// Result is the last result worth showing beside the install in progress:
// nil while the device installs another offer than the one the result
// names, so a previous install's outcome is not taken for the current
// one's. Offers are told apart by their manifest's digest when both give
// it (the same image signed again has the same id), else by id.
func (d Device) Result() *ota.Outcome {
	r, t := d.LastResult, d.Target
	switch {
	case r == nil:
		return nil
	case t != nil && t.ManifestSHA256 != "" && r.ManifestSHA256 != "":
		if t.ManifestSHA256 != r.ManifestSHA256 {
			return nil
		}
	case t != nil && t.ID != "" && t.ID != r.ID:
		return nil
	}
	return r
}

// Failure is the code a failed last result counts under ("" when the last
// result is no failure): its code, or its result when it has none.
func (d Device) Failure() string {
	r := d.LastResult
	if r == nil {
		return ""
	}
	switch r.Result {
	case ota.ResultFailed, ota.ResultRolledBack, ota.ResultRejected:
		if r.Code != "" {
			return string(r.Code)
		}
		return string(r.Result)
	}
	return ""
}

// device is what the view knows of d as a Device; now dates the progress.
func (d *record) device(id string, now time.Time) Device {
	out := Device{ID: id, Online: d.online, Slots: map[ota.Slot]SlotView{}, Groups: []string{}}
	if d.statusErr != nil {
		out.BadStatus = d.statusErr.Error()
	}
	s := d.status
	if s == nil {
		return out
	}
	out.State, out.Booted, out.Running = s.State, s.BootedSlot, s.Slots[s.BootedSlot].Version
	for name, sl := range s.Slots {
		out.Slots[name] = SlotView{Version: sl.Version, Status: sl.Status}
	}
	if t := s.Target; t != nil && (t.ID != "" || t.Version != "") {
		tv := &TargetView{ID: t.ID, ManifestSHA256: t.ManifestSHA256, Version: t.Version, BytesDone: t.BytesDone, BytesTotal: t.BytesTotal}
		if p := d.freshProgress(now); p != nil && p.ID == t.ID {
			tv.BytesDone, tv.BytesTotal = p.BytesDone, p.BytesTotal
		}
		out.Target = tv
	}
	out.LastResult, out.LastRefusal = s.LastResult, s.LastRefusal
	if s.Groups != nil {
		out.Groups = s.Groups
	}
	out.Seq, out.Agent, out.TrustVersion = s.Seq, s.AgentVersion, s.TrustVersion
	if !s.Time.IsZero() {
		t := s.Time
		out.Time = &t
	}
	return out
}

// freshProgress is the last progress report while bytes move, nil when
// there is none or it is stale: progress is QoS 0 and rate limited, so the
// last report is rarely 100% and must not outlive the download.
func (d *record) freshProgress(now time.Time) *ota.Progress {
	moving := d.status == nil || d.status.State == ota.Downloading || d.status.State == ota.Verifying
	if d.progress != nil && moving && now.Sub(d.progressAt) < progressFresh {
		return d.progress
	}
	return nil
}

// Device is what the view knows of device id, with the events it has seen
// (oldest first; only with FollowOptions.Events).
func (v *View) Device(id string) (Device, []ota.Event, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	d := v.devices[id]
	if d == nil {
		return Device{}, nil, false
	}
	return d.device(id, v.now()), d.events.list(), true
}
