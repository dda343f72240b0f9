package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/otad/otad/ota"
)

func named(name string, minute int) Target {
	t := tgt(name, minute)
	t.ManifestSHA256 = "manifest-of-" + name
	return t
}

// failedX is a device on A after image x failed its health check.
func failedX(t *testing.T) State {
	t.Helper()
	imm := Policy{RebootImmediately: true, MaxRestarts: 2}
	s, _ := run(t, fresh(), imm, EvOffer{Target: named("x", 1)}, done(1, ""), EvBoot{Booted: "B", BootID: "b2"}, EvHealth{Message: "unhealthy"})
	s, _ = run(t, s, imm, EvBoot{Booted: "A", BootID: "b3"})
	if s.LastResult == nil || s.LastResult.Result != ota.ResultFailed || s.Phase != ota.Idle {
		t.Fatalf("setup: %+v", s.LastResult)
	}
	return s
}

// Issue 9 (1): refusals never replace last_result, and an offer that ended
// never starts again, whatever arrived in between.
func TestEndedOffersStayEnded(t *testing.T) {
	imm := Policy{RebootImmediately: true, MaxRestarts: 2}
	refused := EvRefused{Outcome: ota.Outcome{Code: ota.CodeBadEnvelope, Message: "garbage"}}
	stale := EvRefused{Outcome: ota.Outcome{ID: "rel-old", SHA256: "old", Code: ota.CodeStale, Message: "older"}}

	s, _ := run(t, failedX(t), imm, refused, stale)
	if s.LastResult.Result != ota.ResultFailed || s.LastRefusal == nil || s.LastRefusal.Code != ota.CodeStale {
		t.Fatalf("after refusals: last_result %+v last_refusal %+v", s.LastResult, s.LastRefusal)
	}
	if _, eff := run(t, s, imm, EvOffer{Target: named("x", 1)}); strings.Contains(eff, "install") {
		t.Fatalf("failed offer redelivered after a refusal: %s", eff)
	}

	// 32 other offers end after x; x is still remembered.
	for i := range 32 {
		gen := s.InstallGen + 1
		s, _ = run(t, s, imm, EvOffer{Target: named(fmt.Sprintf("y%02d", i), 2+i)}, done(gen, ota.CodeHashMismatch))
	}
	if _, eff := run(t, s, imm, EvOffer{Target: named("x", 1)}); strings.Contains(eff, "install") {
		t.Fatalf("x forgotten after 32 other offers ended: %s", eff)
	}
	// A new manifest for the same image tries again.
	if _, eff := run(t, s, imm, EvOffer{Target: named("x2", 100)}); eff != "persist emit(idle>downloading) mark(bad,B) install(rel-x2>B)" {
		t.Fatalf("a newer offer did not start: %s", eff)
	}

	// A committed success stays success in the status after a stale refusal.
	ok, _ := run(t, fresh(), imm, EvOffer{Target: named("n", 1)}, done(1, ""), EvBoot{Booted: "B", BootID: "b2"}, EvHealth{OK: true}, stale)
	if st := Snapshot("d", "v", ok, t0); st.LastResult.Result != ota.ResultSuccess || st.LastRefusal.Code != ota.CodeStale {
		t.Fatalf("status after a stale refusal: last_result %+v last_refusal %+v", st.LastResult, st.LastRefusal)
	}
}

// Issue 9 (1): a flood of refused messages does not write the journal once each.
func TestRefusalFloodSparesTheJournal(t *testing.T) {
	r := newRig(t, Policy{MaxRestarts: 2}, &fakeInstaller{})
	waitIdle(t, r)
	r.store.mu.Lock()
	before := r.store.saves
	r.store.mu.Unlock()
	const n = 1000
	for i := range n {
		r.a.Offer(fmt.Sprintf("source-%d", i), []byte(`}garbage{`))
	}
	deadline := time.Now().Add(10 * time.Second)
	for r.a.Status().Seq < uint64(n) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	r.stop()
	r.store.mu.Lock()
	saves, seq := r.store.saves-before, r.store.s.Seq
	r.store.mu.Unlock()
	if saves > n/20 {
		t.Fatalf("%d journal writes for %d refused messages", saves, n)
	}
	// Seq still only grows across restarts: the next start begins past every seq used.
	s, _, _ := r.store.Load()
	next, _ := Step(s, Policy{}, time.Time{}, EvBoot{Booted: "A", BootID: "boot-2"})
	if next.Seq <= uint64(n) || seq == 0 {
		t.Fatalf("after a restart seq is %d, but refusals used up to %d", next.Seq, n)
	}
}

func waitIdle(t *testing.T, r *rig) {
	t.Helper()
	for i := 0; r.a.Status().Seq == 0; i++ {
		if i > 500 {
			t.Fatal("agent did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// switchChecker refuses everything once its refusal is set.
type switchChecker struct {
	mu     sync.Mutex
	refuse ota.Code
	facts  []Facts
}

func (c *switchChecker) Check(raw []byte, f Facts) (Target, error) {
	c.mu.Lock()
	c.facts = append(c.facts, f)
	code := c.refuse
	c.mu.Unlock()
	if code != "" {
		return Target{}, ota.Wrap(code, errors.New("refused on re-check"))
	}
	return jsonChecker{}.Check(raw, f)
}

// Issue 9 (2): an offer that waited through rebooting/confirming is checked
// again, with that moment's keys, floor and clock, when it is taken up.
func TestPendingOfferIsCheckedAgain(t *testing.T) {
	store := &memStore{}
	chk := &switchChecker{}
	inst := &recordingInstaller{quick: true}
	start := func(booted ota.Slot, bootID string) (*Agent, func()) {
		a, err := New(Config{DeviceID: "d", Policy: Policy{MaxRestarts: 2}, Logger: slog.New(slog.DiscardHandler)}, Deps{
			Store: store, Bootloader: &fakeBoot{}, Installer: inst, Checker: chk, Rebooter: &fakeReboot{}, Health: okHealth{},
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx, booted, bootID) }()
		return a, func() { cancel(); <-done }
	}
	a, stop := start("A", "b1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if o, err := a.Install(ctx, offerJSON(named("x", 1))); err != nil || o.Result != ota.ResultStaged {
		t.Fatalf("x: %+v %v", o, err)
	}
	if o, err := a.Install(ctx, offerJSON(named("p", 2))); err != nil || o.Result != ota.ResultPending {
		t.Fatalf("p: %+v %v", o, err)
	}
	stop()
	chk.mu.Lock()
	chk.refuse = ota.CodeExpired // days later: p expired, or its key was removed
	chk.mu.Unlock()
	a, stop = start("B", "b2") // rebooted into x: confirming, healthy, committed
	defer stop()
	var st ota.Status
	for i := 0; ; i++ {
		st = a.Status()
		if st.LastResult != nil && st.LastResult.Result == ota.ResultSuccess && st.Pending == nil && st.State == ota.Idle {
			break
		}
		if i > 500 {
			t.Fatalf("status %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	if got := inst.started(); fmt.Sprint(got) != "[rel-x]" {
		t.Fatalf("installed %v: the pending offer skipped its re-check", got)
	}
	if st = a.Status(); st.LastRefusal == nil || st.LastRefusal.Code != ota.CodeExpired || st.LastRefusal.ID != "rel-p" {
		t.Fatalf("last_refusal %+v", st.LastRefusal)
	}
}

type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time { return c.t }

// Issue 9 (5), issue 21: the checks' clock is never earlier than the floor,
// the build time or the newest accepted issued_at; the local clock never
// moves it, however far ahead it reads.
func TestClockFloorReachesTheChecks(t *testing.T) {
	build := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	issued := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		clock time.Time
		want  time.Time
	}{
		{"no RTC, booted at 1970", time.Unix(0, 0).UTC(), issued},
		{"clock at 2099", time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC), issued},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := &memStore{ok: true, s: State{Phase: ota.Idle, Slots: map[ota.Slot]SlotInfo{}, NewestIssuedAt: issued}}
			chk := &switchChecker{refuse: ota.CodeExpired}
			a, err := New(Config{DeviceID: "d", BuildTime: build, Logger: slog.New(slog.DiscardHandler)}, Deps{
				Store: store, Bootloader: &fakeBoot{}, Installer: &recordingInstaller{quick: true}, Checker: chk, Rebooter: &fakeReboot{},
				Health: okHealth{}, Clock: fixedClock{tc.clock},
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- a.Run(ctx, "A", "b1") }()
			o, _ := a.Install(context.Background(), []byte(`{}`))
			cancel()
			<-done
			chk.mu.Lock()
			defer chk.mu.Unlock()
			if len(chk.facts) == 0 || !chk.facts[0].ClockFloor.Equal(tc.want) {
				t.Fatalf("facts %+v, want the clock floor at %s", chk.facts, tc.want)
			}
			if o.Result != ota.ResultRejected {
				t.Fatalf("outcome %+v", o)
			}
		})
	}
}
