package rollout

import (
	"strings"
	"testing"
	"time"
)

// The lease, step by step on a fake clock: claimed, refused while another
// holds it live, taken over once it expired, renewed every third of its
// TTL, and lost (nothing but LeaseLost) when this controller has not
// renewed it within its TTL by its own clock — a controller frozen
// (SIGSTOP) past its lease and woken — or when the broker shows another
// holder.
func TestStepLease(t *testing.T) {
	const ttl = 30 * time.Second
	p := testPlan(10, 1, named(0, "d1", "d2"), Wave{Percent: 100})
	claimed := func(holder string) State {
		s, as := Step(NewState(p, t0), p, Claim{Holder: holder, TTL: ttl}, t0)
		if got := acts(as); got != "state" {
			t.Fatalf("claim: %s", got)
		}
		return s
	}
	other := func(renewedAgo time.Duration) State {
		s := NewState(p, t0)
		s.Lease = &Lease{Holder: "ctl-a", Epoch: 3, Since: t0.Add(-time.Hour), Renewed: t0.Add(-renewedAgo), TTLMS: ttl.Milliseconds()}
		return s
	}
	ready := Observe{View: view("d1", "d2")}
	tests := []struct {
		name  string
		s     State
		in    Input
		at    time.Duration
		acts  string
		epoch uint64
		check func(t *testing.T, s State)
	}{
		{name: "a fresh rollout: the first epoch", s: NewState(p, t0), in: Claim{Holder: "ctl-b", TTL: ttl}, acts: "state", epoch: 1,
			check: func(t *testing.T, s State) {
				if h := s.History[len(s.History)-1].Event; h != "controller ctl-b holds the lease (epoch 1)" {
					t.Errorf("history %q", h)
				}
			}},
		{name: "held live by another: refused, nothing published", s: other(10 * time.Second), in: Claim{Holder: "ctl-b", TTL: ttl}, acts: "refused", epoch: 3},
		{name: "expired: taken over with the next epoch", s: other(31 * time.Second), in: Claim{Holder: "ctl-b", TTL: ttl}, acts: "state", epoch: 4,
			check: func(t *testing.T, s State) {
				if h := s.History[len(s.History)-1].Event; !strings.Contains(h, "takes the lease over from ctl-a (expired 2026-11-29T09:59:59Z) (epoch 4)") {
					t.Errorf("history %q", h)
				}
			}},
		{name: "its own lease, claimed again after a restart", s: func() State { s := claimed("ctl-b"); s.run = process{}; return s }(),
			in: Claim{Holder: "ctl-b", TTL: ttl}, at: time.Second, acts: "state", epoch: 2},
		{name: "not renewed before a third of the TTL", s: claimed("ctl-b"), in: Observe{}, at: 9 * time.Second, acts: "none", epoch: 1},
		{name: "renewed at a third of the TTL", s: claimed("ctl-b"), in: Observe{}, at: 10 * time.Second, acts: "state", epoch: 1,
			check: func(t *testing.T, s State) {
				if !s.Lease.Renewed.Equal(t0.Add(10 * time.Second)) {
					t.Errorf("renewed %v", s.Lease.Renewed)
				}
			}},
		{name: "frozen past the lease: lost, nothing published", s: claimed("ctl-b"), in: ready, at: ttl, acts: "lease-lost", epoch: 1},
		{name: "frozen past the lease, woken by a command: lost", s: claimed("ctl-b"), in: Command{ID: "c", Op: OpAbort}, at: time.Minute, acts: "lease-lost", epoch: 1},
		{name: "frozen past the lease, woken with offers confirmed: lost", s: claimed("ctl-b"), in: Offered{Wave: 1}, at: time.Hour, acts: "lease-lost", epoch: 1},
		{name: "the broker shows another holder: lost", s: claimed("ctl-b"), at: time.Second, acts: "lease-lost", epoch: 1,
			in: Seen{State: State{Lease: &Lease{Holder: "ctl-c", Epoch: 2}}}},
		{name: "the broker shows our own state: nothing", s: claimed("ctl-b"), at: time.Second, acts: "none", epoch: 1,
			in: Seen{State: State{Lease: &Lease{Holder: "ctl-b", Epoch: 1}}}},
		{name: "the same epoch under another name: lost", s: claimed("ctl-b"), at: time.Second, acts: "lease-lost", epoch: 1,
			in: Seen{State: State{Lease: &Lease{Holder: "ctl-c", Epoch: 1}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := tc.s.Encode()
			s, as := Step(tc.s, p, tc.in, t0.Add(tc.at))
			if got := acts(as); got != tc.acts {
				t.Errorf("actions %q, want %q", got, tc.acts)
			}
			if s.Lease.epoch() != tc.epoch {
				t.Errorf("epoch %d, want %d", s.Lease.epoch(), tc.epoch)
			}
			if tc.acts == "lease-lost" || tc.acts == "refused" {
				if after, _ := s.Encode(); string(after) != string(before) {
					t.Error("the state changed on a refusal or a lost lease")
				}
			}
			if tc.check != nil {
				tc.check(t, s)
			}
		})
	}
}

// Two controllers claiming a rollout that has no live holder: the broker
// keeps the later claim, and the earlier claimant, shown it, stops.
func TestLeaseRace(t *testing.T) {
	p := testPlan(10, 1, Wave{Percent: 100})
	s := NewState(p, t0)
	a, _ := Step(s, p, Claim{Holder: "ctl-a", TTL: time.Minute}, t0)
	b, _ := Step(s, p, Claim{Holder: "ctl-b", TTL: time.Minute}, t0)
	if _, as := Step(a, p, Seen{State: b}, t0.Add(time.Second)); acts(as) != "lease-lost" {
		t.Errorf("a shown b's claim of the same epoch: %s", acts(as))
	}
	if _, as := Step(b, p, Seen{State: b}, t0.Add(time.Second)); acts(as) != "none" {
		t.Errorf("b shown its own claim: %s", acts(as))
	}
}

// Of two controllers that claimed one epoch, the claim that reached the
// broker after the other's next state is stale; a replay of one holder's
// own older state, a takeover, and a rival's newer state are not.
func TestStaleClaim(t *testing.T) {
	st := func(holder string, epoch, seq uint64) State {
		return State{Seq: seq, Lease: &Lease{Holder: holder, Epoch: epoch}}
	}
	tests := []struct {
		name      string
		latest, s State
		rivals    bool
		stale     bool
	}{
		{"a rival's claim after my next state", st("a", 1, 2), st("b", 1, 1), true, true},
		{"a rival's claim at my counter", st("a", 1, 1), st("b", 1, 1), true, false},
		{"a rival's state newer than mine", st("a", 1, 1), st("b", 1, 2), true, false},
		{"my own older state (a replay)", st("a", 1, 2), st("a", 1, 1), false, false},
		{"an older epoch's state", st("a", 2, 1), st("b", 1, 5), false, false},
		{"a takeover", st("a", 1, 3), st("b", 2, 4), false, false},
		{"no lease", st("a", 1, 2), State{Seq: 1}, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Rivals(tc.latest, tc.s); got != tc.rivals {
				t.Errorf("Rivals = %v, want %v", got, tc.rivals)
			}
			if got := StaleClaim(tc.latest, tc.s); got != tc.stale {
				t.Errorf("StaleClaim = %v, want %v", got, tc.stale)
			}
		})
	}
}
