// Package rolloutsim plays a fleet for the rollout's whole-rollout tests
// (rollout's and rollout/controller's): an offered device shows the offer
// installing, then reports its outcome five minutes later; bad devices
// roll back. It speaks in statuses (ota) only, so the pure core's own
// tests import it too; each package turns the statuses into its view.
package rolloutsim

import (
	"fmt"
	"iter"
	"strings"
	"time"

	"github.com/otad/otad/ota"
)

// The release the tests' rollouts offer, and the one the fleet ran before.
var (
	New = ota.Outcome{ID: "rel-2", SHA256: strings.Repeat("b", 64)}
	Old = ota.Outcome{ID: "rel-1", SHA256: strings.Repeat("a", 64)}
)

// IDs names n devices: gw-0000, gw-0001, …
func IDs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("gw-%04d", i)
	}
	return out
}

// Fleet is the simulated fleet, all in group "g".
type Fleet struct {
	Devices []string
	Bad     map[string]bool      // these roll back
	Offered map[string]time.Time // when each device was first offered New
	Offers  map[string]int       // offers published per device
}

// NewFleet is n devices (IDs), one in badEvery bad (0: none).
func NewFleet(n int, badEvery int) *Fleet {
	f := &Fleet{Devices: IDs(n), Bad: map[string]bool{}, Offered: map[string]time.Time{}, Offers: map[string]int{}}
	for i, d := range f.Devices {
		if badEvery > 0 && i%badEvery == 0 {
			f.Bad[d] = true
		}
	}
	return f
}

// Offer notes an offer of New to devices published at now.
func (f *Fleet) Offer(devices []string, now time.Time) {
	for _, d := range devices {
		if _, ok := f.Offered[d]; !ok {
			f.Offered[d] = now
		}
		f.Offers[d]++
	}
}

// Status is device d's status at now: Old's success, New installing once
// offered, New's outcome five minutes after the offer.
func (f *Fleet) Status(d string, now time.Time) ota.Status {
	old := Old
	old.Result = ota.ResultSuccess
	st := ota.Status{Device: d, Groups: []string{"g"}, LastResult: &old}
	at, ok := f.Offered[d]
	switch {
	case ok && !now.Before(at.Add(5*time.Minute)):
		r := ota.ResultSuccess
		if f.Bad[d] {
			r = ota.ResultRolledBack
		}
		st.LastResult = &ota.Outcome{ID: New.ID, SHA256: New.SHA256, Result: r}
	case ok:
		st.Target = &ota.TargetStatus{ID: New.ID, SHA256: New.SHA256}
	}
	return st
}

// Statuses are every device's status at now, in order.
func (f *Fleet) Statuses(now time.Time) iter.Seq2[string, ota.Status] {
	return func(yield func(string, ota.Status) bool) {
		for _, d := range f.Devices {
			if !yield(d, f.Status(d, now)) {
				return
			}
		}
	}
}
