package fleetview

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

// Summary is the fleet at a glance: devices counted by state, by the
// version they run, by presence, by the code their last result failed
// with, and by the code their last refusal gave (an offer the checks
// refused changes nothing on the device, so without this line it would go
// unseen). `otactl status` prints it under the table (and alone with
// --summary), the dashboard charts it.
type Summary struct {
	Devices  int            `json:"devices"`
	States   map[string]int `json:"states"`   // a phase, StateBad or StateNone
	Versions map[string]int `json:"versions"` // the running version; "" for none known
	Online   map[string]int `json:"online"`   // OnlineYes, OnlineNo, OnlineUnknown
	Failures map[string]int `json:"failures"` // Device.Failure
	Refusals map[string]int `json:"refusals"` // the code of the status's last_refusal
	// Trust counts devices by the version of their root of trust ("v3";
	// "" for none): who has taken a rotation (docs/contract/trust.md).
	Trust map[string]int `json:"trust"`
}

// TrustKey is how the totals name a root of trust's version: "v3"; ""
// for a device without one.
func TrustKey(version uint64) string {
	if version == 0 {
		return ""
	}
	return fmt.Sprintf("v%d", version)
}

// Summary counts the devices f picks.
func (v *View) Summary(f Filter) Summary {
	s := Summary{States: map[string]int{}, Versions: map[string]int{}, Online: map[string]int{}, Failures: map[string]int{}, Refusals: map[string]int{}, Trust: map[string]int{}}
	v.mu.Lock()
	defer v.mu.Unlock()
	for id, d := range v.devices {
		if !f.match(id, d) {
			continue
		}
		s.Devices++
		s.States[d.stateKey()]++
		s.Online[d.presence()]++
		if st := d.status; st != nil {
			s.Versions[st.Slots[st.BootedSlot].Version]++
			if c := failureOf(st.LastResult); c != "" {
				s.Failures[c]++
			}
			if c := refusalOf(st.LastRefusal); c != "" {
				s.Refusals[c]++
			}
			s.Trust[TrustKey(st.TrustVersion)]++
		}
	}
	return s
}

// Write prints the totals, a line each:
//
//	30 devices
//	state:    24 idle, 6 downloading
//	running:  20 2.0.0, 10 1.0.0
//	online:   28 yes, 2 no
//	failures: 3 health_check_failed
//	refused:  2 expired, 1 incompatible
//	trust:    25 v3, 5 v2
//
// The trust line is left out while no device reports a root of trust.
func (s Summary) Write(w io.Writer) error {
	trust := s.Trust
	if len(trust) == 1 && trust[""] > 0 {
		trust = nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n", plural(s.Devices, "device"))
	for _, l := range []struct {
		name string
		m    map[string]int
	}{{"state", s.States}, {"running", s.Versions}, {"online", s.Online}, {"failures", s.Failures}, {"refused", s.Refusals}, {"trust", trust}} {
		if len(l.m) > 0 {
			fmt.Fprintf(&b, "%-9s %s\n", l.name+":", countList(l.m))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// countList is "24 idle, 6 downloading": the largest count first, then by
// name; an empty name (no version known) is shown as "-".
func countList(m map[string]int) string {
	keys := slices.SortedFunc(maps.Keys(m), func(a, b string) int {
		if c := cmp.Compare(m[b], m[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d %s", m[k], clean(OrDash(k)))
	}
	return strings.Join(parts, ", ")
}

// plural is "1 device", "2 devices".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
