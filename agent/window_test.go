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

// Issue 21: the commit window counts from the first boot of the new slot,
// across restarts of the agent: a crash-looping agent (a restart every few
// seconds, each one before the verdict) cannot keep an uncommitted slot for
// ever by starting the window again each time.
func TestCommitWindowCountsAcrossRestarts(t *testing.T) {
	const window = time.Hour
	first := time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC)
	target := &Target{ID: "rel-n", Version: "n", Slot: ota.SlotB, Payload: ota.Payload{SHA256: strings.Repeat("ab", 32)}}
	store := &memStore{ok: true, s: State{Phase: ota.Rebooting, Target: target, BootID: "boot-1", Booted: ota.SlotA,
		Slots: map[ota.Slot]SlotInfo{ota.SlotA: {Version: "o", Status: ota.SlotGood}, ota.SlotB: {Version: "n", SHA256: target.Payload.SHA256, Status: ota.SlotStaged}}}}
	health := &deadlineHealth{}
	start := func(now time.Time, bootID string) (*Agent, func()) {
		a, err := New(Config{DeviceID: "d", CommitWindow: window, Logger: slog.New(slog.DiscardHandler)}, Deps{
			Store: store, Bootloader: &fakeBoot{}, Installer: &recordingInstaller{quick: true}, Checker: jsonChecker{},
			Rebooter: &fakeReboot{}, Health: health, Clock: fixedClock{now},
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
	// The first boot of the new slot: the whole window.
	_, stop := start(first, "boot-2")
	if d := waitChecks(1); time.Until(d) < window-time.Minute {
		t.Fatalf("first start: %s left of the window", time.Until(d))
	}
	stop()
	if s, _, _ := store.Load(); s.Phase != ota.Confirming || !s.Target.ConfirmingSince.Equal(first) {
		t.Fatalf("journal %s since %v, want confirming since %s", s.Phase, s.Target.ConfirmingSince, first)
	}
	// Restarted 40 minutes later (same boot: the agent crashed): 20 left.
	_, stop = start(first.Add(40*time.Minute), "boot-2")
	if left := time.Until(waitChecks(2)); left > 21*time.Minute || left < 19*time.Minute {
		t.Fatalf("restart after 40 minutes: %s left of the window, want 20m", left)
	}
	stop()
	// Restarted past the window: rejected at once, the health check not run again.
	a, stop := start(first.Add(window+time.Second), "boot-2")
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
	if len(health.deadlines) != 2 {
		t.Fatalf("health checks run: %d, want 2", len(health.deadlines))
	}
}
