package rollout

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/ota"
)

// simFleet plays a fleet for whole-rollout tests: an offered device reports
// its outcome five minutes later; bad devices roll back.
type simFleet struct {
	devices []string
	bad     map[string]bool
	offered map[string]time.Time
	offers  map[string]int // offers published per device
}

func newSimFleet(n int, badEvery int) *simFleet {
	f := &simFleet{devices: ids(n), bad: map[string]bool{}, offered: map[string]time.Time{}, offers: map[string]int{}}
	for i, d := range f.devices {
		if badEvery > 0 && i%badEvery == 0 {
			f.bad[d] = true
		}
	}
	return f
}

func (f *simFleet) view(now time.Time) View {
	v := View{Ready: true, Devices: make(map[string]ota.Status, len(f.devices))}
	for _, d := range f.devices {
		st := ota.Status{Device: d, Groups: []string{"g"}, LastResult: &ota.Outcome{ID: oldRef.ID, SHA256: oldRef.SHA256, Result: ota.ResultSuccess}}
		if at, ok := f.offered[d]; ok && !now.Before(at.Add(5*time.Minute)) {
			r := ota.ResultSuccess
			if f.bad[d] {
				r = ota.ResultRolledBack
			}
			st.LastResult = &ota.Outcome{ID: testOffer.ID, SHA256: testOffer.SHA256, Result: r}
		}
		v.Devices[d] = st
	}
	return v
}

// drive runs a controller against the fleet, a step a minute, until it
// finishes or halts. restart round-trips the state through its JSON before
// every step, as a controller started again from the retained state alone
// would see it; dropOffer loses the offers of that many first Offer actions,
// as a controller killed between publishing its state and its offers.
func drive(t *testing.T, p *Plan, f *simFleet, restart bool, dropOffer int) State {
	t.Helper()
	s := NewState(p, t0)
	for now := t0; now.Before(t0.Add(48 * time.Hour)); now = now.Add(time.Minute) {
		if restart {
			b, err := json.Marshal(s)
			if err != nil {
				t.Fatal(err)
			}
			s = State{}
			if err := json.Unmarshal(b, &s); err != nil {
				t.Fatal(err)
			}
		}
		var as []Action
		s, as = Step(s, p, Observe{View: f.view(now)}, now)
		for _, a := range as {
			switch a := a.(type) {
			case Offer:
				if dropOffer > 0 {
					dropOffer--
					continue
				}
				for _, d := range a.Devices {
					if _, ok := f.offered[d]; !ok {
						f.offered[d] = now
					}
					f.offers[d]++
				}
				s, _ = Step(s, p, Offered{Wave: a.Wave}, now)
			case Halt, Finish:
				return s
			}
		}
	}
	t.Fatalf("rollout neither finished nor halted: %s %s", s.Phase, s.Reason)
	return s
}

func members(s State) []string {
	var out []string
	for _, w := range s.Waves {
		out = append(out, slices.Sorted(maps.Keys(w.Devices))...)
	}
	slices.Sort(out)
	return out
}

func TestRolloutAgainstASimulatedFleet(t *testing.T) {
	spec := testPlan(5, 10, named(30*time.Minute, "gw-0001", "gw-0002"), Wave{Percent: 10, Soak: 2 * time.Hour}, Wave{Percent: 100})
	for _, tc := range []struct {
		name              string
		badEvery          int
		restart           bool
		dropOffer         int
		phase             string
		wave, offeredDevs int
	}{
		{"one device in five fails: halts in the 10% wave", 5, false, 0, PhaseHalted, 2, 50},
		{"the same with a controller restarted before every step", 5, true, 0, PhaseHalted, 2, 50},
		{"the same with a controller killed before it sent its offers", 5, true, 2, PhaseHalted, 2, 50},
		{"no failures: every device offered once, finished", 0, false, 0, PhaseFinished, 3, 500},
		{"no failures, restarted before every step", 0, true, 0, PhaseFinished, 3, 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newSimFleet(500, tc.badEvery)
			s := drive(t, spec, f, tc.restart, tc.dropOffer)
			if s.Phase != tc.phase || s.Wave != tc.wave || s.Counts.Devices != tc.offeredDevs {
				t.Fatalf("%s in wave %d with %d devices (%s), want %s in wave %d with %d", s.Phase, s.Wave, s.Counts.Devices, s.Reason, tc.phase, tc.wave, tc.offeredDevs)
			}
			// No device outside the started waves was offered, each at most once
			// (once more only where a killed controller's offers were lost).
			want := members(s)
			if got := slices.Sorted(maps.Keys(f.offers)); !slices.Equal(got, want) {
				t.Errorf("offered %d devices, waves hold %d", len(got), len(want))
			}
			for d, n := range f.offers {
				if n != 1 {
					t.Errorf("%s offered %d times", d, n)
				}
			}
			// A restarted controller comes to the same outcome as one that ran through.
			if tc.restart {
				ref := drive(t, spec, newSimFleet(500, tc.badEvery), false, 0)
				if !slices.Equal(members(ref), want) || ref.Counts != s.Counts || ref.Phase != s.Phase {
					t.Errorf("restarted: %s %+v; straight: %s %+v", s.Phase, s.Counts, ref.Phase, ref.Counts)
				}
			}
		})
	}
}

func TestStepLeavesItsInputAlone(t *testing.T) {
	p := testPlan(10, 1, named(0, "d1", "d2"), named(0, "d3"))
	s, _ := run(t, p, obs(0, "d1", "d2", "d3"), sent(time.Minute, 1))
	before, _ := json.Marshal(s)
	for _, in := range []Input{
		Observe{View: view("d1=success", "d2=failed", "d3")}, Command{ID: "x", Op: OpPause}, Command{ID: "y", Op: OpAbort},
	} {
		Step(s, p, in, t0.Add(time.Hour))
		if after, _ := json.Marshal(s); string(after) != string(before) {
			t.Fatalf("Step(%T) changed its input state", in)
		}
	}
}

func TestStateJSON(t *testing.T) {
	p := testPlan(10, 1, named(0, "d1", "d2"), named(0, "d3"))
	s, _ := run(t, p, obs(0, "d1", "d2", "d3"), sent(time.Minute, 1), obs(2*time.Minute, "d1=success", "d2"))
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`"name":"r1"`, `"plan_hash":"h1"`, `"offer":{"id":"rel-2","sha256":"bbbb`, `"state":"running"`, `"wave":1`, `"wave_count":2`,
		`"counts":{"devices":2,"pending":1,"success":1,`, `"devices":{"d1":"success","d2":""}`, `"offered":"2026-11-29T10:01:00Z"`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("state JSON lacks %s:\n%s", want, b)
		}
	}
	var back State
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, s) {
		t.Errorf("round trip differs:\n%+v\n%+v", back, s)
	}
}

// The retained state of a 10,000-device rollout stays small enough for a
// broker to carry as one message.
func TestStateSizeAt10000Devices(t *testing.T) {
	p := testPlan(5, 10, Wave{Percent: 1}, Wave{Percent: 10}, Wave{Percent: 100})
	f := newSimFleet(10000, 0)
	for i := range f.devices {
		f.devices[i] = fmt.Sprintf("sim-%05d", i)
	}
	f.bad = map[string]bool{}
	s := drive(t, p, f, false, 0)
	b, _ := json.Marshal(s)
	t.Logf("state of %d devices (%s): %d bytes", s.Counts.Devices, s.Phase, len(b))
	if s.Counts.Devices != 10000 || len(b) > 300_000 {
		t.Errorf("%d devices, %d bytes", s.Counts.Devices, len(b))
	}
}
