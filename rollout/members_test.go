package rollout

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/otad/otad/internal/testkit/rolloutsim"
)

func ids(n int) []string { return rolloutsim.IDs(n) }

func TestOrderIsStable(t *testing.T) {
	devs := ids(200)
	a := Order("fw-4.2.0", devs)
	shuffled := slices.Clone(devs)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	if b := Order("fw-4.2.0", shuffled); !slices.Equal(a, b) {
		t.Error("order depends on the order devices were seen in")
	}
	if slices.Equal(a, devs) {
		t.Error("order is the ID order: the same devices would always go first")
	}
	if c := Order("fw-4.3.0", devs); slices.Equal(a, c) {
		t.Error("two rollouts order the fleet the same way")
	}
	// Pinned: a controller built from this code in another year must choose
	// the same devices for a rollout under way.
	if got := Order("fw-4.2.0", []string{"gw-0001", "gw-0002", "gw-0003", "gw-0004"}); !slices.Equal(got, pinnedOrder) {
		t.Errorf("order %v, pinned %v", got, pinnedOrder)
	}
}

// pinnedOrder is what `printf 'fw-4.2.0\0gw-000N' | sha256sum`, sorted, gives.
var pinnedOrder = []string{"gw-0003", "gw-0004", "gw-0001", "gw-0002"}

// waves computes every wave's members the way Step does, wave after wave.
func waves(p *Plan, group []string) [][]string { return Assign(p, group) }

func TestMembers(t *testing.T) {
	group := ids(500)
	spec := testPlan(5, 10, named(0, "gw-0007", "gw-0400"), Wave{Percent: 10}, Wave{Percent: 100})
	tests := []struct {
		name  string
		plan  *Plan
		group []string
		sizes []int
	}{
		{"the contract's example: 2 canaries, then to 10% of the group, then everybody else", spec, group, []int{2, 48, 450}},
		{"10% then 100% without canaries", testPlan(5, 1, Wave{Percent: 10}, Wave{Percent: 100}), group, []int{50, 450}},
		{"percentages round up: 1% of 50 is one device", testPlan(5, 1, Wave{Percent: 1}, Wave{Percent: 100}), ids(50), []int{1, 49}},
		{"a repeated percentage adds nobody", testPlan(5, 1, Wave{Percent: 10}, Wave{Percent: 10}, Wave{Percent: 50}), group, []int{50, 0, 200}},
		{"a plan may stop short of the whole group", testPlan(5, 1, Wave{Percent: 20}), group, []int{100}},
		{"named devices outside the group are offered and count", testPlan(5, 1, named(0, "lab-1", "lab-2"), Wave{Percent: 100}), ids(8), []int{2, 8}},
		{"a named device later in the plan is not taken by an earlier percent", testPlan(5, 1, Wave{Percent: 100}, named(0, "gw-0003")), ids(10), []int{9, 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ws := waves(tc.plan, tc.group)
			seen := map[string]int{}
			for i, w := range ws {
				if len(w) != tc.sizes[i] {
					t.Errorf("wave %d has %d devices, want %d", i+1, len(w), tc.sizes[i])
				}
				for _, d := range w {
					if at, dup := seen[d]; dup {
						t.Errorf("%s in waves %d and %d", d, at, i+1)
					}
					seen[d] = i + 1
				}
			}
		})
	}
	t.Run("a restarted controller computes the same waves", func(t *testing.T) {
		shuffled := slices.Clone(group)
		slices.Reverse(shuffled)
		a, b := waves(spec, group), waves(spec, shuffled)
		for i := range a {
			if !slices.Equal(a[i], b[i]) {
				t.Errorf("wave %d differs", i+1)
			}
		}
	})
	t.Run("the 10% wave is the first of the stable order", func(t *testing.T) {
		ws := waves(spec, group)
		pool := slices.DeleteFunc(slices.Clone(group), func(d string) bool { return d == "gw-0007" || d == "gw-0400" })
		if want := Order(spec.Name, pool)[:48]; !slices.Equal(ws[1], want) {
			t.Error("wave 2 is not the first 48 of the stable order")
		}
	})
	t.Run("devices seen later belong to the wave whose range holds their place", func(t *testing.T) {
		p := testPlan(5, 1, Wave{Percent: 10}, Wave{Percent: 100})
		first := DeviceMap{}
		for _, id := range ids(100) {
			first[id] = Device{Place: PlaceOf(p.Name, id), InGroup: true}
		}
		ws := []WaveState{startWave(p, nil, 0, first)}
		if ws[0].Chosen != 10 || len(members(p, ws, 0, first)) != 10 {
			t.Fatalf("wave 1 chose %d", ws[0].Chosen)
		}
		later := DeviceMap{}
		for _, id := range ids(120) {
			later[id] = Device{Place: PlaceOf(p.Name, id), InGroup: true}
		}
		ws = append(ws, startWave(p, ws, 1, later))
		a, b := members(p, ws, 0, later), members(p, ws, 1, later)
		if len(a) < 10 || len(a)+len(b) != 120 || ws[1].Chosen != len(b) {
			t.Errorf("waves of %d and %d (chosen %d), want 10 or more and all 120", len(a), len(b), ws[1].Chosen)
		}
		for _, d := range a {
			if later[d].Place > *ws[0].Through {
				t.Errorf("%s past wave 1's range", d)
			}
		}
	})
}

// A place is 16 hex digits in the state and reads back the same.
func TestPlaceText(t *testing.T) {
	p := PlaceOf("fw-4.2.0", "gw-0001")
	b, _ := p.MarshalText()
	var q Place
	if err := q.UnmarshalText(b); err != nil || q != p || len(b) != 16 {
		t.Fatalf("%s reads back as %s (%v)", b, q, err)
	}
	for _, bad := range []string{"", "123", "zzzzzzzzzzzzzzzz", "00000000000000000"} {
		if err := q.UnmarshalText([]byte(bad)); err == nil {
			t.Errorf("%q read as a place", bad)
		}
	}
}
