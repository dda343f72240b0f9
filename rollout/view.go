package rollout

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/otad/otad/ota"
)

// Device is what the controller knows of one device: what its status
// says about this rollout's offer, and where it stands in the order.
type Device struct {
	Place   Place
	InGroup bool       // its status lists the plan's group
	Outcome ota.Result // of this rollout's offer (OutcomeOf); "" while none
	// Working: its status shows it installing this offer (its target or
	// its pending offer), so it has it.
	Working bool
	// Moved: Outcome was decided by an earlier status, which a later one
	// (about another image) no longer shows (rule 4 keeps it).
	Moved bool
	// Seen is when this controller first heard of the device.
	Seen time.Time
}

// Observed is a device as a status snapshot shows it to rollout name,
// releasing offer to group; prev is what was known of it before (nil:
// nothing). A decided outcome stays: a later status about another image
// does not undo it (the device is then Moved); a timeout is the
// controller's to decide, not the device's.
func Observed(name, group string, offer Ref, id string, st ota.Status, prev *Device, now time.Time) Device {
	var d Device
	if prev != nil {
		d = *prev
	} else {
		d = Device{Place: PlaceOf(name, id), Seen: now}
	}
	d.InGroup = slices.Contains(st.Groups, group)
	o := OutcomeOf(st, offer)
	switch {
	case o.Ended():
		d.Outcome, d.Moved = o.Result, false
	case d.Outcome != "":
		d.Moved = true
	}
	d.Working = !o.Ended() && offer.installing(st, "")
	return d
}

// Devices is the fleet as observed; Step only reads it.
type Devices interface {
	// Each calls fn for every device heard of.
	Each(fn func(id string, d Device))
	// Lookup is one device.
	Lookup(id string) (Device, bool)
	// Len is how many devices have been heard of.
	Len() int
}

// DeviceMap is a Devices held in a map (tests, Assign).
type DeviceMap map[string]Device

func (m DeviceMap) Each(fn func(string, Device)) {
	for id, d := range m {
		fn(id, d)
	}
}

func (m DeviceMap) Lookup(id string) (Device, bool) { d, ok := m[id]; return d, ok }
func (m DeviceMap) Len() int                        { return len(m) }

// View is the fleet as the controller sees it when it steps.
type View struct {
	// Ready is false until a first snapshot of the fleet is complete:
	// nothing is judged on a view that has not been filled yet.
	Ready   bool
	Devices Devices
	// Records are the per-device records written so far (read back at
	// start, and every Record action carried out since).
	Records map[string]Record
}

func (v View) lookup(id string) (Device, bool) {
	if v.Devices == nil {
		return Device{}, false
	}
	return v.Devices.Lookup(id)
}

func (v View) each(fn func(string, Device)) {
	if v.Devices != nil {
		v.Devices.Each(fn)
	}
}

// Record is what must survive about one device that its status cannot
// show, retained on {prefix}/rollouts/{name}/devices/{id}
// (docs/contract/rollouts.md): written only for those devices, so a
// rollout of a million devices writes few.
type Record struct {
	Device string `json:"device"`
	Wave   int    `json:"wave"` // from 1
	// Kept is an outcome decided from an earlier status that the device's
	// status no longer shows (it has moved on to another image).
	Kept ota.Result `json:"kept,omitempty"`
	// Accepted is the failure an operator's resume accepted: the halt rule
	// judges the other devices.
	Accepted ota.Result `json:"accepted,omitempty"`
	Time     time.Time  `json:"time"`
}

// DecodeRecord reads a per-device record (outside input) retained on
// topic for device.
func DecodeRecord(b []byte, device string) (Record, error) {
	if len(b) > MaxReadSize {
		return Record{}, fmt.Errorf("record of device %s is %d bytes, over the limit of %d", device, len(b), MaxReadSize)
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return Record{}, fmt.Errorf("record of device %s: %w", device, err)
	}
	if r.Device != device {
		return Record{}, fmt.Errorf("record of device %q on device %s's topic", r.Device, device)
	}
	if r.Wave < 1 || r.Wave > maxWaves {
		return Record{}, fmt.Errorf("record of device %s: %w", device, &BoundsError{Field: "wave", Value: r.Wave, Limit: fmt.Sprintf("1 to %d", maxWaves)})
	}
	if (r.Kept != "" && !knownOutcome(r.Kept)) || (r.Accepted != "" && !bad(r.Accepted)) {
		return Record{}, fmt.Errorf("record of device %s: outcome %q or accepted %q is not one", device, r.Kept, r.Accepted)
	}
	return r, nil
}

func knownOutcome(o ota.Result) bool {
	switch o {
	case ota.ResultSuccess, ota.ResultUpToDate, ota.ResultSuperseded:
		return true
	}
	return bad(o)
}
