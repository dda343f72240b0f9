package rollout

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestRender(t *testing.T) {
	p := testPlan(5, 10, named(0, "d1", "d2"), Wave{Percent: 100})
	s, _ := run(t, p, obs(0, "d1", "d2", "d3"), sent(time.Minute, 1), obs(2*time.Minute, "d1=success", "d2=rolled_back", "d3"))
	var out strings.Builder
	if err := Render(context.Background(), &out, s, 2, time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"rollout r1: HALTED — 1 of 2 devices with an outcome failed (50.0%)",
		"[###############xxxxxxxxxxxxxxx] 100%", "1 success, 1 rolled_back", "2     -        -",
		"not started", "halted in wave 1",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}

func TestBar(t *testing.T) {
	for _, tc := range []struct {
		c      Counts
		queued int
		want   string
	}{
		{Counts{}, 0, "[                              ] 100%"},
		{Counts{Devices: 8, Success: 6, RolledBack: 2}, 0, "[######################xxxxxxxx] 100%"},
		{Counts{Devices: 100, Failed: 1, Pending: 99}, 0, "[x.............................]   1%"},
		{Counts{Devices: 100, Success: 50, TimedOut: 1, Pending: 49}, 0, "[##############x...............]  51%"},
		{Counts{Devices: 3, UpToDate: 1, Pending: 2}, 0, "[##########....................]  33%"},
		// A paced wave paused with most of it queued is not done.
		{Counts{Devices: 21, Success: 21}, 159, "[###...........................]  11%"},
	} {
		if got := bar(tc.c, tc.queued); got != tc.want {
			t.Errorf("bar(%+v) = %q, want %q", tc.c, got, tc.want)
		}
	}
}

// A killed controller leaves its last renewal in the retained state, and a
// controller that ended its released lease: neither reads as live
// (docs/contract/rollouts.md, the lease).
func TestLeaseLine(t *testing.T) {
	renewed := time.Date(2026, 12, 5, 10, 40, 25, 0, time.Local)
	live := &Lease{Holder: "ops@h pid 30338", Epoch: 2, Since: renewed.Add(-time.Minute), Renewed: renewed, TTLMS: 30000}
	released := *live
	released.Released = renewed.Add(time.Second)
	for _, tc := range []struct {
		name      string
		l         *Lease
		now       time.Time
		want, not string
	}{
		{"live", live, renewed.Add(10 * time.Second), "lease renewed 2026-12-05 10:40:25", "no controller"},
		{"expired", live, renewed.Add(35 * time.Second), "lease expired 2026-12-05 10:40:55 (last renewed 2026-12-05 10:40:25): no controller runs it", "lease renewed"},
		{"released", &released, renewed.Add(2 * time.Second), "stopped 2026-12-05 10:40:26 (lease released): no controller runs it", "lease renewed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := leaseLine(tc.l, tc.now)
			if !strings.Contains(got, tc.want) || strings.Contains(got, tc.not) {
				t.Errorf("%q: want %q, not %q", got, tc.want, tc.not)
			}
		})
	}
}

// Unrun names the last holder and when its lease ended; nothing while the
// lease is live or the rollout has ended.
func TestUnrun(t *testing.T) {
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	l := &Lease{Holder: "alice@ops-1 pid 4242 3fa2c1", Epoch: 3, Since: at, Renewed: at, TTLMS: 30000}
	s := State{Name: "fw-2", Phase: PhaseRunning, Lease: l}
	if got := Unrun(s, at.Add(29*time.Second)); got != "" {
		t.Errorf("live lease: %s", got)
	}
	want := "no controller runs rollout fw-2: the lease of alice@ops-1 pid 4242 3fa2c1 (epoch 3) expired " + clock(at.Add(30*time.Second)) +
		" (last renewed " + clock(at) + "); nothing moves until otactl rollout start with its plan takes it over"
	if got := Unrun(s, at.Add(31*time.Second)); got != want {
		t.Errorf("expired:\n%s\nwant\n%s", got, want)
	}
	released := *l
	released.Released = at.Add(time.Second)
	s.Lease = &released
	if got := Unrun(s, at.Add(2*time.Second)); !strings.Contains(got, "alice@ops-1 pid 4242 3fa2c1 (epoch 3) released its lease "+clock(at.Add(time.Second))) {
		t.Errorf("released: %s", got)
	}
	s.Finished = &Mark{Time: at}
	if got := Unrun(s, at.Add(time.Hour)); got != "" {
		t.Errorf("finished: %s", got)
	}
}
