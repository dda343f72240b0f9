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

	"github.com/otad/otad/internal/testkit/rolloutsim"
)

// simFleet is the simulated fleet (internal/testkit/rolloutsim) and what
// the controller has heard of it, kept across steps.
type simFleet struct {
	*rolloutsim.Fleet
	known DeviceMap
}

func newSimFleet(n int, badEvery int) *simFleet {
	return &simFleet{Fleet: rolloutsim.NewFleet(n, badEvery), known: DeviceMap{}}
}

// view is the fleet now; fresh forgets what was heard (a restarted
// controller), and everybody is heard of anew.
func (f *simFleet) view(p *Plan, now time.Time, fresh bool) View {
	if fresh {
		f.known = DeviceMap{}
	}
	for d, st := range f.Statuses(now) {
		prev, had := f.known[d]
		var pp *Device
		if had {
			pp = &prev
		}
		f.known[d] = Observed(p.Name, p.Group, testRef, d, st, pp, now)
	}
	return View{Ready: true, Devices: f.known}
}

// drive runs a controller against the fleet, a step a minute, until it
// finishes or halts. restart round-trips the state through its JSON before
// every step, as a controller started again from the retained state alone
// would see it; dropOffer loses the offers of that many first Offer actions,
// as a controller killed between publishing its state and its offers.
func drive(t *testing.T, p *Plan, f *simFleet, restart bool, dropOffer int) State {
	t.Helper()
	s := NewState(p, t0)
	records := map[string]Record{}
	for now := t0; now.Before(t0.Add(48 * time.Hour)); now = now.Add(time.Minute) {
		if restart {
			b, err := s.Encode()
			if err != nil {
				t.Fatal(err)
			}
			if s, err = DecodeState(b); err != nil {
				t.Fatal(err)
			}
		}
		v := f.view(p, now, restart)
		v.Records = records
		for in := Input(Observe{View: v}); in != nil; {
			var as []Action
			s, as = Step(s, p, in, now)
			in = nil
			for _, a := range as {
				switch a := a.(type) {
				case PublishRecord:
					records[a.Record.Device] = a.Record
				case Offer:
					if dropOffer > 0 {
						dropOffer--
						continue
					}
					f.Offer(a.Devices, now)
					s, _ = Step(s, p, Offered{Wave: a.Wave, Through: a.Through}, now)
					if a.CatchUp {
						s, _ = Step(s, p, CaughtUp{N: len(a.Devices)}, now)
					}
					in = Observe{View: v} // the driver steps again at once
				case Halt, Finish:
					return s
				}
			}
		}
	}
	t.Fatalf("rollout neither finished nor halted: %s %s", s.Phase, s.Reason)
	return s
}

// offeredMembers are the devices the state counts as offered, computed
// from the fleet's view as a controller would.
func offeredMembers(p *Plan, s State, v View) []string {
	m := &machine{s: s, p: p, now: t0}
	var out []string
	m.eachMember(v, func(mb *member) {
		if mb.offered {
			out = append(out, mb.id)
		}
	})
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
			// No device outside the started waves was offered, each once.
			want := offeredMembers(spec, s, f.view(spec, t0, false))
			if got := slices.Sorted(maps.Keys(f.Offers)); !slices.Equal(got, want) {
				t.Errorf("offered %d devices, waves hold %d", len(got), len(want))
			}
			for d, n := range f.Offers {
				if n != 1 {
					t.Errorf("%s offered %d times", d, n)
				}
			}
			// A restarted controller comes to the same outcome as one that ran through.
			if tc.restart {
				ref := drive(t, spec, newSimFleet(500, tc.badEvery), false, 0)
				if ref.Counts != s.Counts || ref.Phase != s.Phase || ref.Wave != s.Wave {
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
		Claim{Holder: "other", TTL: time.Minute},
	} {
		Step(s, p, in, t0.Add(time.Hour))
		if after, _ := json.Marshal(s); string(after) != string(before) {
			t.Fatalf("Step(%T) changed its input state", in)
		}
	}
}

func TestStateJSON(t *testing.T) {
	p := testPlan(10, 1, named(0, "d1", "d2"), Wave{Percent: 100})
	s, _ := run(t, p, obs(0, "d1", "d2", "d3"), sent(time.Minute, 1), obs(2*time.Minute, "d1=success", "d2", "d3"))
	b, err := s.Encode()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`"name":"r1"`, `"plan_hash":"h1"`, `"offer":{"id":"rel-2","sha256":"bbbb`, `"state":"running"`, `"wave":1`, `"wave_count":2`,
		`"counts":{"devices":2,"pending":1,"success":1,`, `"kind":"devices"`, `"offered":"2026-11-29T10:01:00Z"`, `"cursor":"`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("state JSON lacks %s:\n%s", want, b)
		}
	}
	for _, never := range []string{"d1", "d2"} {
		if strings.Contains(string(b), never) {
			t.Errorf("the state names device %s: it must not grow with the fleet\n%s", never, b)
		}
	}
	back, err := DecodeState(b)
	if err != nil {
		t.Fatal(err)
	}
	back.run, s.run = process{}, process{}
	if !reflect.DeepEqual(back, s) {
		t.Errorf("round trip differs:\n%+v\n%+v", back, s)
	}
	if _, err := DecodeState(make([]byte, MaxReadSize+1)); err == nil || !strings.Contains(err.Error(), "over the limit") {
		t.Errorf("an oversized state: %v", err)
	}
}

// The retained state does not grow with the fleet: 100,000 devices in
// three percent waves, with a device in ten failing and a resume, stays
// under MaxStateSize (bench/rollout measures a million).
func TestStateSizeAt100000Devices(t *testing.T) {
	p := testPlan(50, 10, Wave{Percent: 1}, Wave{Percent: 10}, Wave{Percent: 100})
	f := newSimFleet(100000, 0)
	for i := range f.Devices {
		f.Devices[i] = fmt.Sprintf("%032x", i) // machine-id names
		if i%10 == 0 {
			f.Bad[f.Devices[i]] = true
		}
	}
	s := drive(t, p, f, false, 0)
	b, err := s.Encode()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("state of %d devices (%s): %d bytes", s.Counts.Devices, s.Phase, len(b))
	if s.Counts.Devices != 100000 || len(b) > MaxStateSize || s.Counts.RolledBack != 10000 {
		t.Errorf("%d devices (%d rolled back), %d bytes", s.Counts.Devices, s.Counts.RolledBack, len(b))
	}
}

// A state with as many waves and as long a history as a plan allows is
// still published under MaxStateSize: the oldest history goes first.
func TestEncodeKeepsTheStateSmall(t *testing.T) {
	ws := make([]Wave, maxWaves)
	for i := range ws {
		ws[i] = Wave{Percent: float64(i+1) * 100 / maxWaves}
	}
	p := testPlan(5, 1, ws...)
	s := NewState(p, t0)
	far := LastPlace
	for i := range ws {
		s.Waves = append(s.Waves, WaveState{Kind: WavePercent, Started: t0, Offered: t0, Ended: t0, Through: &far, Cursor: &far, Chosen: 1 << 20,
			Pace: &Pace{PerMinute: 12345.678, Tokens: 3.14159, At: t0}, Counts: Counts{Devices: 1 << 20, Success: 1<<20 - 7, Failed: 3, TimedOut: 4}})
		s.Wave = i + 1
	}
	for i := range maxHistory {
		s.History = append(s.History, Change{Time: t0, Event: fmt.Sprintf("wave %d ended: %s", i, strings.Repeat("x", 200))})
	}
	s.Lease = &Lease{Holder: strings.Repeat("h", 100), Epoch: 9, Since: t0, Renewed: t0, TTLMS: 30000}
	b, err := s.Encode()
	if err != nil {
		t.Fatal(err)
	}
	back, _ := DecodeState(b)
	if len(b) > MaxStateSize || len(back.History) == 0 || len(back.History) == maxHistory || back.History[len(back.History)-1].Event != s.History[len(s.History)-1].Event {
		t.Errorf("%d bytes, %d of %d history entries kept", len(b), len(back.History), maxHistory)
	}
}
