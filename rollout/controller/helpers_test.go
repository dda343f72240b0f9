package controller

import (
	"fmt"
	"strings"
	"time"

	"github.com/otad/otad/ota"
	"github.com/otad/otad/rollout"
)

// The fixtures of the controller's tests: rollout's own (helpers_test.go
// there), the few the driver, inbox and tracker need.

var t0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

// The offer every test plan releases, and the image the fleet ran before.
var (
	testOffer = rollout.PlanOffer{ID: "rel-2", Version: "2.0", SHA256: strings.Repeat("b", 64)}
	testRef   = rollout.Ref{ID: testOffer.ID, SHA256: testOffer.SHA256}
	oldRef    = rollout.Ref{ID: "rel-1", SHA256: strings.Repeat("a", 64)}
)

func testPlan(maxFailed float64, minOutcomes int, waves ...rollout.Wave) *rollout.Plan {
	return &rollout.Plan{Name: "r1", Group: "g", Waves: waves, Offer: testOffer, Hash: "h1",
		Halt: rollout.HaltRule{MaxFailedPercent: maxFailed, MinOutcomes: minOutcomes, DeviceTimeout: time.Hour}}
}

func named(soak time.Duration, devices ...string) rollout.Wave {
	return rollout.Wave{Devices: devices, Soak: soak}
}

// status is a device's status in group "g": what is "" (no outcome), a
// result of the offer (success, failed, …), "old-<result>" (a result for
// the previous release), "installing" or "out" (not in the group).
func status(name, what string) ota.Status {
	st := ota.Status{Device: name, State: ota.Idle, Groups: []string{"g"}, LastResult: &ota.Outcome{ID: oldRef.ID, SHA256: oldRef.SHA256, Result: ota.ResultSuccess}}
	switch {
	case what == "":
	case what == "out":
		st.Groups = []string{"other"}
	case what == "installing":
		st.State = ota.Downloading
		st.Target = &ota.TargetStatus{ID: testOffer.ID, SHA256: testOffer.SHA256}
	case strings.HasPrefix(what, "old-"):
		st.LastResult.Result = ota.Result(strings.TrimPrefix(what, "old-"))
	default:
		st.LastResult = &ota.Outcome{ID: testOffer.ID, SHA256: testOffer.SHA256, Result: ota.Result(what)}
	}
	return st
}

// view builds a ready view of devices in group "g", each "name" or
// "name=what" (status), all heard of at t0.
func view(devs ...string) rollout.View {
	m := rollout.DeviceMap{}
	for _, d := range devs {
		name, what, _ := strings.Cut(d, "=")
		m[name] = rollout.Observed("r1", "g", testRef, name, status(name, what), nil, t0)
	}
	return rollout.View{Ready: true, Devices: m}
}

func ids(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("gw-%04d", i)
	}
	return out
}

// simFleet plays a fleet for whole-rollout tests: an offered device shows
// the offer installing, then reports its outcome five minutes later; bad
// devices roll back.
type simFleet struct {
	devices []string
	bad     map[string]bool
	offered map[string]time.Time
	offers  map[string]int    // offers published per device
	known   rollout.DeviceMap // what the controller has heard, kept across steps
}

func newSimFleet(n int, badEvery int) *simFleet {
	f := &simFleet{devices: ids(n), bad: map[string]bool{}, offered: map[string]time.Time{}, offers: map[string]int{}, known: rollout.DeviceMap{}}
	for i, d := range f.devices {
		if badEvery > 0 && i%badEvery == 0 {
			f.bad[d] = true
		}
	}
	return f
}

func (f *simFleet) status(d string, now time.Time) ota.Status {
	st := ota.Status{Device: d, Groups: []string{"g"}, LastResult: &ota.Outcome{ID: oldRef.ID, SHA256: oldRef.SHA256, Result: ota.ResultSuccess}}
	at, ok := f.offered[d]
	switch {
	case ok && !now.Before(at.Add(5*time.Minute)):
		r := ota.ResultSuccess
		if f.bad[d] {
			r = ota.ResultRolledBack
		}
		st.LastResult = &ota.Outcome{ID: testOffer.ID, SHA256: testOffer.SHA256, Result: r}
	case ok:
		st.Target = &ota.TargetStatus{ID: testOffer.ID, SHA256: testOffer.SHA256}
	}
	return st
}

// view is the fleet now, everybody heard of anew.
func (f *simFleet) view(p *rollout.Plan, now time.Time) rollout.View {
	for _, d := range f.devices {
		prev, had := f.known[d]
		var pp *rollout.Device
		if had {
			pp = &prev
		}
		f.known[d] = rollout.Observed(p.Name, p.Group, testRef, d, f.status(d, now), pp, now)
	}
	return rollout.View{Ready: true, Devices: f.known}
}
