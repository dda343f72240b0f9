package fleetview

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/otad/otad/ota"
)

// States a Filter takes besides the six phases: the latest status did not
// decode, or no status was heard (presence or progress only).
const (
	StateBad  = "bad"
	StateNone = "none"
)

// Presence values of a Filter and of Summary.Online.
const (
	OnlineYes     = "yes"
	OnlineNo      = "no"
	OnlineUnknown = "unknown"
)

// Filter picks devices; its zero value picks every one. The fields add up
// (a device must match each one set).
type Filter struct {
	Group   string   // its status lists this group
	Devices []string // its ID is one of these
	State   string   // a phase, StateBad or StateNone
	Version string   // the version it runs
	Online  string   // OnlineYes, OnlineNo or OnlineUnknown
	Failure string   // its last result failed with this code (Device.Failure)
	Refusal string   // its last refusal has this code
	Trust   string   // it holds the root of trust of this version, as TrustKey names it ("v3")
	Search  string   // case-insensitive part of its ID, running version or a group
}

// Check refuses a State or Online value no device can have.
func (f Filter) Check() error {
	if f.State != "" && !ota.Phase(f.State).Valid() && f.State != StateBad && f.State != StateNone {
		return fmt.Errorf("state %q: want one of idle, downloading, verifying, staged, rebooting, confirming, %s (a status that did not decode) or %s (no status)",
			f.State, StateBad, StateNone)
	}
	if f.Online != "" && f.Online != OnlineYes && f.Online != OnlineNo && f.Online != OnlineUnknown {
		return fmt.Errorf("online %q: want %s, %s or %s", f.Online, OnlineYes, OnlineNo, OnlineUnknown)
	}
	return nil
}

// match reports whether device id, with what the view knows of it, passes f.
func (f Filter) match(id string, d *record) bool {
	s := d.status
	switch {
	case len(f.Devices) > 0 && !slices.Contains(f.Devices, id):
		return false
	case f.Group != "" && (s == nil || !slices.Contains(s.Groups, f.Group)):
		return false
	case f.State != "" && f.State != d.stateKey():
		return false
	case f.Version != "" && (s == nil || s.Slots[s.BootedSlot].Version != f.Version):
		return false
	case f.Online != "" && f.Online != d.presence():
		return false
	case f.Failure != "" && (s == nil || failureOf(s.LastResult) != f.Failure):
		return false
	case f.Refusal != "" && (s == nil || refusalOf(s.LastRefusal) != f.Refusal):
		return false
	case f.Trust != "" && (s == nil || TrustKey(s.TrustVersion) != f.Trust):
		return false
	}
	if f.Search == "" {
		return true
	}
	q := strings.ToLower(f.Search)
	if strings.Contains(strings.ToLower(id), q) {
		return true
	}
	if s == nil {
		return false
	}
	if strings.Contains(strings.ToLower(s.Slots[s.BootedSlot].Version), q) {
		return true
	}
	return slices.ContainsFunc(s.Groups, func(g string) bool { return strings.Contains(strings.ToLower(g), q) })
}

// stateKey is the device's state as Filter.State and Summary.States name it.
func (d *record) stateKey() string {
	switch {
	case d.statusErr != nil:
		return StateBad
	case d.status == nil:
		return StateNone
	}
	return string(d.status.State)
}

func (d *record) presence() string {
	switch {
	case d.online == nil:
		return OnlineUnknown
	case *d.online:
		return OnlineYes
	}
	return OnlineNo
}

func failureOf(r *ota.Outcome) string { return Device{LastResult: r}.Failure() }

// refusalOf is the code a refusal counts under; "" for none.
func refusalOf(r *ota.Refusal) string {
	if r == nil {
		return ""
	}
	return string(cmp.Or(r.Code, "refused"))
}

// Page is one page of the devices a Filter picks, in ID order.
type Page struct {
	Total   int      `json:"total"` // devices the filter picks
	Offset  int      `json:"offset"`
	Devices []Device `json:"devices"`
}

// Query returns the devices f picks, from offset on, at most limit of them
// (limit ≤ 0: all). It walks the devices in ID order and builds only the
// rows returned, so a page of a 100,000-device fleet stays cheap.
func (v *View) Query(f Filter, offset, limit int) Page {
	v.mu.Lock()
	defer v.mu.Unlock()
	now := v.now()
	p := Page{Offset: max(offset, 0), Devices: []Device{}}
	for _, e := range v.orderLocked() {
		id, d := e.id, e.rec
		if !f.match(id, d) {
			continue
		}
		if p.Total >= p.Offset && (limit <= 0 || len(p.Devices) < limit) {
			p.Devices = append(p.Devices, d.device(id, now))
		}
		p.Total++
	}
	return p
}

// placed is a device in the view's ID order.
type placed struct {
	id  string
	rec *record
}

// orderLocked is the devices sorted by ID, kept between calls: devices are
// never forgotten (nor their records replaced), so the order changes only
// when the count does.
func (v *View) orderLocked() []placed {
	if len(v.order) != len(v.devices) {
		v.order = v.order[:0]
		for id, d := range v.devices {
			v.order = append(v.order, placed{id, d})
		}
		slices.SortFunc(v.order, func(a, b placed) int { return strings.Compare(a.id, b.id) })
	}
	return v.order
}
