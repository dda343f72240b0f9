package fleetview

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/otad/otad/ota"
	"github.com/otad/otad/rollout"
)

// Brief shows an outcome as the fleet table does: "success",
// "failed/health_check_failed".
func Brief(o ota.Outcome) string {
	if o.Code == "" {
		return string(o.Result)
	}
	return string(o.Result) + "/" + string(o.Code)
}

// briefOf is Brief of a status's last result, "" when there is none.
func briefOf(o *ota.Outcome) string {
	if o == nil {
		return ""
	}
	return Brief(*o)
}

// Finish is how a followed offer ended on one device, once it settled.
type Finish struct {
	rollout.Outcome
	ota.Transfer               // what its install fetched and reused (none for a refusal)
	Took         time.Duration // from Begin to the settled status
	Booted       ota.Slot      // the slot the device runs afterwards
	Running      string        // the version in that slot
}

// Begin starts following offer id: outcomes for it count from now on. The
// view knows the offer by its manifest id alone (rollout.Ref with no
// sha256): BeginOffer tells two signatures of one image apart.
func (v *View) Begin(id string) { v.BeginOffer(rollout.Ref{ID: id}) }

// BeginOffer starts following offer: outcomes for it count from now on,
// matched by its manifest's digest when offer and the device both give it
// (rollout.OutcomeOf). Finished takes the offer's Key.
func (v *View) BeginOffer(offer rollout.Ref) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.follow = &follow{offer: offer, start: v.now()}
	for _, d := range v.devices {
		d.baseline = nil
		if r := lastRefusal(d); r != nil {
			c := *r
			d.baseline = &c
		}
	}
}

// Verdict is where the followed offer stands.
type Verdict struct {
	Pending []string // devices without an outcome yet
	Wrong   []string // "device: what happened instead", for outcomes other than expected
}

// Done reports whether every device ended as expected.
func (v Verdict) Done() bool { return len(v.Pending) == 0 && len(v.Wrong) == 0 }

// Check compares the followed offer's outcomes on the devices ids with
// want's result and code.
func (v *View) Check(ids []string, want rollout.Outcome) Verdict {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.follow == nil {
		return Verdict{Pending: slices.Clone(ids)}
	}
	var out Verdict
	for _, id := range ids {
		d := v.devices[id]
		if d == nil {
			out.Pending = append(out.Pending, id)
			continue
		}
		if f, ok := d.finish[key(v.follow.offer)]; ok {
			if f.Result != want.Result || f.Code != want.Code {
				out.Wrong = append(out.Wrong, fmt.Sprintf("%s: %s, want %s", id, f.Outcome, want))
			}
			continue
		}
		// A refusal of a forged or garbled offer may name no offer (so
		// OutcomeOf cannot tell it is this one's): one newer than Begin
		// still ends the offer on that device.
		// A refusal naming another offer (an older one, retained elsewhere
		// and delivered again) says nothing of this one.
		if r := lastRefusal(d); r != nil && v.follow.mayName(r) && (d.baseline == nil || *r != *d.baseline) {
			out.Wrong = append(out.Wrong, fmt.Sprintf("%s: offer refused: %s: %s", id, r.Code, r.Message))
			continue
		}
		out.Pending = append(out.Pending, id)
	}
	return out
}

func lastRefusal(d *record) *ota.Refusal {
	if d.status == nil {
		return nil
	}
	return d.status.LastRefusal
}

// Finished is how the offer followed under key ended on the device: its
// manifest's digest when BeginOffer was given one, else its id.
func (v *View) Finished(device, key string) (Finish, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	d := v.devices[device]
	if d == nil {
		return Finish{}, false
	}
	f, ok := d.finish[key]
	return f, ok
}

// key is what the finishes of offer are kept under.
func key(offer rollout.Ref) string {
	if offer.ManifestSHA256 != "" {
		return offer.ManifestSHA256
	}
	return offer.ID
}

// mayName reports whether refusal r may be of the followed offer: it names
// it, or it names nothing (a forged or garbled envelope).
func (f *follow) mayName(r *ota.Refusal) bool {
	switch {
	case r.ManifestSHA256 != "" && f.offer.ManifestSHA256 != "":
		return r.ManifestSHA256 == f.offer.ManifestSHA256
	case r.ID == "":
		return true
	}
	return r.ID == f.offer.ID
}

// Describe says where each of the devices ids stands, for a message when a
// rollout does not converge.
func (v *View) Describe(ids []string) []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	ids = slices.Clone(ids)
	sort.Strings(ids)
	var out []string
	for _, id := range ids {
		d := v.devices[id]
		if d == nil || d.status == nil {
			out = append(out, id+": no status received")
			continue
		}
		s := d.status
		line := fmt.Sprintf("%s: state %s, booted %s", id, s.State, s.BootedSlot)
		if r := s.LastResult; r != nil {
			line += fmt.Sprintf(", last result %s %s", r.ID, Brief(*r))
		}
		out = append(out, line)
	}
	return out
}

// Tally counts the devices by state and last result ("idle success: 480,
// downloading: 20"), for a fleet too large to Describe.
func (v *View) Tally() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	tally := map[string]int{}
	for _, d := range v.devices {
		k := "no status"
		if s := d.status; s != nil {
			k = string(s.State)
			if r := briefOf(s.LastResult); r != "" {
				k += " " + r
			}
		}
		tally[k]++
	}
	keys := make([]string, 0, len(tally))
	for k := range tally {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s: %d", k, tally[k])
	}
	return strings.Join(parts, ", ")
}
