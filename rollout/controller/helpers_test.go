package controller

import (
	"crypto"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/internal/testkit/rolloutsim"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/rollout"
	"github.com/otad/otad/verify"
)

// The fixtures of the controller's tests: rollout's own (helpers_test.go
// there), the few the driver, inbox and tracker need.

var t0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

// The offer every test plan releases, and the image the fleet ran before.
var (
	testOffer = rollout.PlanOffer{ID: rolloutsim.New.ID, Version: "2.0", SHA256: rolloutsim.New.SHA256}
	testRef   = rollout.Ref{ID: testOffer.ID, SHA256: testOffer.SHA256}
	oldRef    = rollout.Ref{ID: rolloutsim.Old.ID, SHA256: rolloutsim.Old.SHA256}
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

func ids(n int) []string { return rolloutsim.IDs(n) }

// simFleet is the simulated fleet (internal/testkit/rolloutsim) and what
// the controller has heard of it, kept across steps.
type simFleet struct {
	*rolloutsim.Fleet
	known rollout.DeviceMap
}

func newSimFleet(n int, badEvery int) *simFleet {
	return &simFleet{Fleet: rolloutsim.NewFleet(n, badEvery), known: rollout.DeviceMap{}}
}

// view is the fleet now, everybody heard of anew.
func (f *simFleet) view(p *rollout.Plan, now time.Time) rollout.View {
	for d, st := range f.Statuses(now) {
		prev, had := f.known[d]
		var pp *rollout.Device
		if had {
			pp = &prev
		}
		f.known[d] = rollout.Observed(p.Name, p.Group, testRef, d, st, pp, now)
	}
	return rollout.View{Ready: true, Devices: f.known}
}

// unsigned is the trust of the tests of other things than signatures: an
// unsigned control plane (--insecure-unsigned).
var unsigned = rollout.Trust{Unsigned: true}

// operatorKey is a throwaway operator key and the trust in it alone.
func operatorKey(t testing.TB) (crypto.Signer, rollout.Trust) {
	t.Helper()
	k, err := verify.GenerateKey(verify.KeyEd25519)
	if err != nil {
		t.Fatal(err)
	}
	return k, rollout.Trust{Keys: verify.NewKeyring(verify.Key{Public: k.Public()})}
}

// mustSeal is s as a controller with key publishes it on topic (key nil:
// unsigned).
func mustSeal(t testing.TB, key crypto.Signer, topic string, s rollout.State) []byte {
	t.Helper()
	b, err := s.Encode()
	if err == nil {
		b, err = rollout.Seal(key, topic, s.Counter(), b)
	}
	if err != nil {
		t.Fatal(err)
	}
	return b
}
