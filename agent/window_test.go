package agent

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/otad/otad/ota"
)

// deadlineHealth records the deadline each health check was given and
// fails: an image whose agent never gets a verdict in.
type deadlineHealth struct {
	mu        sync.Mutex
	deadlines []time.Time
}

func (h *deadlineHealth) Check(ctx context.Context) error {
	d, _ := ctx.Deadline()
	h.mu.Lock()
	h.deadlines = append(h.deadlines, d)
	h.mu.Unlock()
	<-ctx.Done()
	return ctx.Err()
}

// fixedUptime pins the boot clock.
type fixedUptime time.Duration

func (u fixedUptime) Uptime() time.Duration { return time.Duration(u) }

// Issues 21 and 32: the commit window counts the new slot's running time,
// across restarts of the agent and reboots: a crash-looping agent (a restart
// every few seconds, each one before the verdict) cannot keep an
// uncommitted slot for ever by starting the window again each time, and the
// wall clock, which jumps by months on boards without an RTC when NTP
// arrives, neither ends it at once nor stretches it.
func TestCommitWindowCountsRunningTime(t *testing.T) {
	const window = time.Hour
	const year = 400 * 24 * time.Hour
	first := time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC)
	target := &Target{ID: "rel-n", Version: "n", Slot: ota.SlotB, Payload: ota.Payload{SHA256: strings.Repeat("ab", 32)}}
	store := &memStore{ok: true, s: State{Phase: ota.Rebooting, Target: target, BootID: "boot-1", Booted: ota.SlotA,
		Slots: map[ota.Slot]SlotInfo{ota.SlotA: {Version: "o", Status: ota.SlotGood}, ota.SlotB: {Version: "n", SHA256: target.Payload.SHA256, Status: ota.SlotStaged}}}}
	health := &deadlineHealth{}
	start := func(wall time.Time, uptime time.Duration, bootID string) (*Agent, func()) {
		a, err := New(Config{DeviceID: "d", CommitWindow: window, Logger: slog.New(slog.DiscardHandler)}, Deps{
			Store: store, Bootloader: &fakeBoot{}, Installer: &recordingInstaller{quick: true}, Checker: jsonChecker{},
			Rebooter: &fakeReboot{}, Health: health, Clock: fixedClock{wall}, Uptime: fixedUptime(uptime),
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx, ota.SlotB, bootID) }()
		return a, func() { cancel(); <-done }
	}
	waitChecks := func(n int) time.Time {
		for i := 0; ; i++ {
			health.mu.Lock()
			got := len(health.deadlines)
			var d time.Time
			if got >= n {
				d = health.deadlines[n-1]
			}
			health.mu.Unlock()
			if got >= n {
				return d
			}
			if i > 500 {
				t.Fatalf("health check %d never started", n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	near := func(what string, left, want time.Duration) {
		t.Helper()
		if left > want+time.Minute || left < want-time.Minute {
			t.Fatalf("%s: %s left of the window, want %s", what, left, want)
		}
	}
	// The first boot of the new slot: the whole window.
	_, stop := start(first, 10*time.Second, "boot-2")
	near("first start", time.Until(waitChecks(1)), window)
	stop()
	if s, _, _ := store.Load(); s.Phase != ota.Confirming || !s.Target.ConfirmingSince.Equal(first) {
		t.Fatalf("journal %s since %v, want confirming since %s", s.Phase, s.Target.ConfirmingSince, first)
	}
	steps := []struct {
		what   string
		wall   time.Time
		uptime time.Duration
		boot   string
		left   time.Duration
	}{
		// The agent crashed and started again 40 minutes into the boot,
		// after NTP moved the clock 400 days on: 20 minutes are left.
		{"restart after a forward jump", first.Add(year), 10*time.Second + 40*time.Minute, "boot-2", 20 * time.Minute},
		// Five minutes later, the clock stepped 400 days back: 15 left,
		// not a window and more.
		{"restart after a backward jump", first.Add(-year), 10*time.Second + 45*time.Minute, "boot-2", 15 * time.Minute},
		// The device rebooted (the bootloader's counter counts that
		// attempt): what the last boot ran is kept, whatever the clock.
		{"reboot", first.Add(2 * year), 5 * time.Second, "boot-3", 15 * time.Minute},
	}
	for i, st := range steps {
		_, stop = start(st.wall, st.uptime, st.boot)
		near(st.what, time.Until(waitChecks(i+2)), st.left)
		stop()
	}
	// Started again past the window's running time: rejected at once, the
	// health check not run again.
	a, stop := start(first.Add(-2*year), 5*time.Second+15*time.Minute+time.Second, "boot-3")
	defer stop()
	for i := 0; ; i++ {
		st := a.Status()
		if r := st.LastResult; r != nil {
			if r.Result != ota.ResultFailed || r.Code != ota.CodeHealthCheckFailed || !strings.Contains(r.Message, "commit window") {
				t.Fatalf("after the window: %+v", r)
			}
			break
		}
		if i > 500 {
			t.Fatalf("after the window: still %s", st.State)
		}
		time.Sleep(5 * time.Millisecond)
	}
	health.mu.Lock()
	defer health.mu.Unlock()
	if len(health.deadlines) != 1+len(steps) {
		t.Fatalf("health checks run: %d, want %d", len(health.deadlines), 1+len(steps))
	}
}

// The running-time count: within a boot the boot clock, across boots what
// each one ran up to its last sighting.
func TestRunTime(t *testing.T) {
	type obs struct {
		boot   string
		uptime time.Duration
	}
	cases := []struct {
		name string
		obs  []obs
		want time.Duration
	}{
		{"one sighting", []obs{{"b1", 7 * time.Second}}, 0},
		{"within a boot", []obs{{"b1", 7 * time.Second}, {"b1", 67 * time.Second}}, time.Minute},
		{"a reading below the last adds nothing", []obs{{"b1", time.Minute}, {"b1", 2 * time.Minute}, {"b1", time.Second}}, time.Minute},
		{"across boots", []obs{{"b1", 10 * time.Second}, {"b1", 70 * time.Second}, {"b2", 3 * time.Second}, {"b2", 33 * time.Second}}, 90 * time.Second},
		{"a boot unseen after its start counts nothing", []obs{{"b1", 10 * time.Second}, {"b2", 50 * time.Second}, {"b3", 5 * time.Second}, {"b3", 6 * time.Second}}, time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := RunTime{Boot: c.obs[0].boot, From: c.obs[0].uptime, Seen: c.obs[0].uptime}
			for _, o := range c.obs[1:] {
				r = r.At(o.boot, o.uptime)
			}
			if got := r.Used(); got != c.want {
				t.Fatalf("used %s, want %s (%+v)", got, c.want, r)
			}
		})
	}
}

// The running time is journaled while the health check runs: EvRunning
// moves it on in confirming, and nowhere else.
func TestRunningIsJournaled(t *testing.T) {
	s := State{Phase: ota.Confirming, BootID: "b1", Booted: ota.SlotB,
		Target: &Target{ID: "n", Slot: ota.SlotB, Confirming: RunTime{Boot: "b1", From: time.Second, Seen: time.Second}}}
	next, effects := Step(s, Policy{}, time.Time{}, EvRunning{Uptime: 31 * time.Second})
	if got := next.Target.Confirming.Used(); got != 30*time.Second {
		t.Fatalf("used %s after 30 s, want 30s", got)
	}
	if len(effects) != 1 {
		t.Fatalf("effects %s, want the journal written", fx(effects))
	}
	if _, ok := effects[0].(Persist); !ok {
		t.Fatalf("effects %s, want the journal written", fx(effects))
	}
	s.Phase = ota.Idle
	if _, effects := Step(s, Policy{}, time.Time{}, EvRunning{Uptime: time.Hour}); len(effects) != 0 {
		t.Fatalf("idle: effects %s, want none", fx(effects))
	}
}

// Issue 32: the offer under way (or one that ended), delivered again to a
// clock that jumped since, is no refusal: the same bytes change nothing. A
// refusal for another reason, or of another offer, is still recorded.
func TestClockJumpRefusalOfAKnownOffer(t *testing.T) {
	under := &Target{ID: "n", ManifestSHA256: "m1", Slot: ota.SlotB}
	base := State{Phase: ota.Confirming, BootID: "b1", Booted: ota.SlotB, Target: under, Seq: 5, SeqMark: 100,
		Ended: []Ended{{Key: "m0", ID: "old", Result: ota.ResultSuccess}}}
	cases := []struct {
		name     string
		manifest string
		code     ota.Code
		recorded bool
	}{
		{"the offer under way, expired", "m1", ota.CodeExpired, false},
		{"the offer under way, not yet valid", "m1", ota.CodeNotYetValid, false},
		{"an ended offer, expired", "m0", ota.CodeExpired, false},
		{"the offer under way, bad signature", "m1", ota.CodeBadSignature, true},
		{"another offer, expired", "m2", ota.CodeExpired, true},
		{"no manifest digest", "", ota.CodeExpired, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			next, effects := Step(base.Clone(), Policy{}, time.Time{}, EvRefused{Outcome: ota.Outcome{ID: "x", ManifestSHA256: c.manifest, Code: c.code}})
			if got := next.LastRefusal != nil; got != c.recorded {
				t.Fatalf("refusal recorded %v, want %v (effects %s)", got, c.recorded, fx(effects))
			}
			if !c.recorded && len(effects) != 0 {
				t.Fatalf("effects %s, want none", fx(effects))
			}
		})
	}
}

// TestStatusShowsWindowLeft: in confirming the status says since when (the wall
// clock, shown only) and how much of the commit window's running time is left,
// read when it is asked: an operator told to wait for the window sees how long.
func TestStatusShowsWindowLeft(t *testing.T) {
	const window = time.Hour
	since := time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		boot   string
		uptime time.Duration
		left   time.Duration
	}{
		{"same boot, 40 minutes on", "boot-2", 10*time.Second + 40*time.Minute, 15 * time.Minute},
		{"after a reboot", "boot-3", 3 * time.Second, 55 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := &Target{ID: "rel-n", Version: "n", Slot: ota.SlotB, Payload: ota.Payload{SHA256: strings.Repeat("ab", 32)},
				ConfirmingSince: since, Confirming: RunTime{Boot: "boot-2", From: 10 * time.Second, Seen: 10 * time.Second, Ran: 5 * time.Minute}}
			store := &memStore{ok: true, s: State{Phase: ota.Confirming, Target: target, BootID: "boot-2", Booted: ota.SlotB,
				Slots: map[ota.Slot]SlotInfo{ota.SlotA: {Version: "o", Status: ota.SlotGood}, ota.SlotB: {Version: "n", SHA256: target.Payload.SHA256, Status: ota.SlotStaged}}}}
			a, err := New(Config{DeviceID: "d", CommitWindow: window, Logger: slog.New(slog.DiscardHandler)}, Deps{
				Store: store, Bootloader: &fakeBoot{}, Installer: &recordingInstaller{quick: true}, Checker: jsonChecker{},
				Rebooter: &fakeReboot{}, Health: &deadlineHealth{}, Clock: fixedClock{since.Add(time.Hour)}, Uptime: fixedUptime(tc.uptime),
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- a.Run(ctx, ota.SlotB, tc.boot) }()
			defer func() { cancel(); <-done }()
			for i := 0; ; i++ {
				st := a.Status()
				if tg := st.Target; st.State == ota.Confirming && tg != nil && tg.WindowLeftMS != nil && st.BootID == tc.boot {
					if got := time.Duration(*tg.WindowLeftMS) * time.Millisecond; got != tc.left || !tg.ConfirmingSince.Equal(since) {
						t.Fatalf("%s left since %v, want %s since %v", got, tg.ConfirmingSince, tc.left, since)
					}
					return
				}
				if i > 500 {
					t.Fatalf("status %s, target %+v", st.State, st.Target)
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
}
