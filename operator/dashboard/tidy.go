package dashboard

import (
	"cmp"
	"maps"
	"slices"

	"github.com/otad/otad/fleetview"
	"github.com/otad/otad/ota"
)

// What devices publish is outside input: the page escapes it (it sets text,
// never markup), and the server cuts what is too long to show, so a 100 KB
// refusal message costs neither the browser nor the wire. Names are cut
// shorter than messages.
const (
	maxName = 128
	maxText = 2000
)

// cut keeps at most n runes of s, marking the cut.
func cut(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}

func cutAll(n int, ss ...*string) {
	for _, s := range ss {
		*s = cut(*s, n)
	}
}

// tidyDevice is d with its strings cut; what it points to is copied, never
// changed (it is the fleet view's).
func tidyDevice(d fleetview.Device) fleetview.Device {
	cutAll(maxName, &d.ID, &d.Running, &d.Agent)
	cutAll(maxText, &d.BadStatus)
	slots := make(map[ota.Slot]fleetview.SlotView, len(d.Slots))
	for k, v := range d.Slots {
		if k.Valid() {
			cutAll(maxName, &v.Version)
			slots[k] = v
		}
	}
	d.Slots = slots
	if d.Target != nil {
		t := *d.Target
		cutAll(maxName, &t.ID, &t.Version)
		d.Target = &t
	}
	if d.LastResult != nil {
		r := *d.LastResult
		cutAll(maxName, &r.ID, &r.SHA256, &r.ManifestSHA256, (*string)(&r.Code), (*string)(&r.Result))
		cutAll(maxText, &r.Message)
		d.LastResult = &r
	}
	if d.LastRefusal != nil {
		r := *d.LastRefusal
		cutAll(maxName, &r.ID, &r.SHA256, &r.ManifestSHA256, (*string)(&r.Code))
		cutAll(maxText, &r.Message)
		d.LastRefusal = &r
	}
	groups := make([]string, 0, min(len(d.Groups), 16))
	for _, g := range d.Groups[:min(len(d.Groups), 16)] {
		groups = append(groups, cut(g, maxName))
	}
	d.Groups = groups
	cutAll(maxName, (*string)(&d.State), (*string)(&d.Booted))
	return d
}

func tidyEvent(e ota.Event) ota.Event {
	cutAll(maxName, &e.Device, &e.BootID, &e.ID, &e.SHA256, &e.ManifestSHA256, (*string)(&e.From), (*string)(&e.To),
		(*string)(&e.Result), (*string)(&e.Code))
	cutAll(maxText, &e.Message)
	return e
}

// maxBars is how many counts a chart shows; the rest are added up as
// other: devices may report as many versions as they like.
const (
	maxBars = 20
	other   = "(other)"
)

// top keeps the maxBars largest counts of m, names cut, the rest as other.
func top(m map[string]int) map[string]int {
	keys := slices.SortedFunc(maps.Keys(m), func(a, b string) int {
		if c := cmp.Compare(m[b], m[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	out := make(map[string]int, min(len(keys), maxBars+1))
	for i, k := range keys {
		if i < maxBars {
			out[cut(k, maxName)] += m[k]
		} else {
			out[other] += m[k]
		}
	}
	return out
}

// tidyOverview cuts the names in the totals (versions, codes) and the
// rollouts' texts.
func tidyOverview(o Overview) Overview {
	for _, m := range []*map[string]int{&o.Summary.States, &o.Summary.Versions, &o.Summary.Online, &o.Summary.Failures, &o.Summary.Refusals, &o.Summary.Trust} {
		*m = top(*m)
	}
	for i := range o.Rollouts {
		r := &o.Rollouts[i]
		cutAll(maxText, &r.Reason, &r.BadState)
		for j := range r.Failed {
			f := &r.Failed[j]
			cutAll(maxName, &f.Device, (*string)(&f.Code))
			cutAll(maxText, &f.Message)
		}
	}
	return o
}
