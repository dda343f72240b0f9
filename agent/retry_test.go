package agent

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otad/otad/ota"
)

type countingInstaller struct {
	fakeInstaller
	n    atomic.Int32
	fail atomic.Bool // the download fails
}

func (c *countingInstaller) Install(ctx context.Context, job InstallJob, progress func(ota.Progress)) error {
	c.n.Add(1)
	if c.fail.Load() {
		return ota.Errorf(ota.CodeDownloadFailed, "connection refused")
	}
	return c.fakeInstaller.Install(ctx, job, progress)
}

// A download that keeps failing is retried by the agent [retry] attempts
// times, then left for an explicit act: the offer installs again when a
// person hands it over, and a redelivery from the network does not.
func TestRetryBounded(t *testing.T) {
	inst := &countingInstaller{}
	inst.fail.Store(true)
	a, err := New(Config{DeviceID: "dev-1", Policy: Policy{RetryAttempts: 2}, Logger: slog.New(slog.DiscardHandler),
		RetryDelay: time.Millisecond, Rand: func() float64 { return 0.5 }}, Deps{
		Store: &memStore{}, Bootloader: &fakeBoot{}, Installer: inst, Checker: jsonChecker{}, Rebooter: &fakeReboot{}, Health: okHealth{},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx, "A", "boot-1") }()
	defer func() { cancel(); <-done }()
	raw := offerJSON(tgt("n", 1))
	o, err := a.Install(ctx, raw)
	if err != nil || o.Result != ota.ResultFailed || o.Code != ota.CodeDownloadFailed {
		t.Fatalf("first outcome %+v %v", o, err)
	}
	// Two retries, then the ending stays, retryable, with no timer armed.
	final := func() bool {
		st := a.Status()
		r := st.LastResult
		return st.State == ota.Idle && r != nil && r.Retryable && strings.Contains(r.Message, "retryable:")
	}
	for i := 0; !final(); i++ {
		if i > 2000 {
			t.Fatalf("retries did not end: %d installs, status %+v", inst.n.Load(), a.Status().LastResult)
		}
		time.Sleep(5 * time.Millisecond)
	}
	armed := make(chan bool)
	a.cmds <- func() { armed <- a.retries.target != nil }
	if <-armed {
		t.Fatal("a retry is still armed after the last one")
	}
	if n := inst.n.Load(); n != 3 {
		t.Fatalf("%d installs, want 1 and 2 retries", n)
	}
	// A redelivery restarts nothing; otad install of the same offer does.
	a.Offer("ota/devices/dev-1/desired", raw)
	inst.fail.Store(false)
	o, err = a.Install(ctx, raw)
	if err != nil || o.Result != ota.ResultStaged {
		t.Fatalf("otad install after the retries: %+v %v", o, err)
	}
	if n := inst.n.Load(); n != 4 {
		t.Fatalf("%d installs, want 4: the redelivery started one", n)
	}
}

// last_result.retrying (and the ended entry's) is true only while the
// agent's own retry of a failed download is armed (docs/contract/installing.md,
// the automatic retry): the retry's start, an offer in its place, a newer
// ending, a dropped retry and a restart all clear it, and the last try's
// failure never sets it. The fleet side waits while it is true
// (docs/contract/rollouts.md, rule 3).
func TestRetryingOnlyWhileARetryIsArmed(t *testing.T) {
	p := Policy{RetryAttempts: 1}
	n, m := tgt("n", 1), tgt("m", 2)
	again := n
	again.Try = 1
	failedN := []Event{EvOffer{Target: n}, done(1, ota.CodeDownloadFailed)}
	tests := []struct {
		name     string
		events   []Event
		retrying bool
		effects  string // of the last event, when given
	}{
		{"a download failed with retries left", failedN, true, "persist emit(downloading>idle,failed,download_failed) retry(rel-n,1)"},
		{"the retry starts", append(failedN, EvRetry{Target: again}), false, ""},
		{"the retry's try failed, the last one", append(failedN, EvRetry{Target: again}, done(2, ota.CodeDownloadFailed)), false,
			"persist emit(downloading>idle,failed,download_failed)"},
		{"a newer offer installs in its place", append(failedN, EvOffer{Target: m}), false, ""},
		{"the loop dropped the retry", append(failedN, EvRetry{Target: again, Dropped: true}), false, "persist emit(idle>idle)"},
		{"the agent started again", append(failedN, EvBoot{Booted: "A", BootID: "b1"}), false, ""},
		{"the agent started after a reboot", append(failedN, EvBoot{Booted: "A", BootID: "b2"}), false, ""},
	}
	for _, tc := range tests {
		s, effects := run(t, fresh(), p, tc.events...)
		lr := s.LastResult
		if lr == nil || lr.Retrying != tc.retrying {
			t.Errorf("%s: last_result %+v, want retrying %v", tc.name, lr, tc.retrying)
		}
		for _, e := range s.Ended {
			if e.Retrying && (!tc.retrying || e.Key != n.Key()) {
				t.Errorf("%s: ended %+v is retrying", tc.name, e)
			}
		}
		if e := endedOf(t, s, n); e.Retrying != tc.retrying || !e.Retryable {
			t.Errorf("%s: ended %+v, want retryable, retrying %v", tc.name, e, tc.retrying)
		}
		if tc.effects != "" && effects != tc.effects {
			t.Errorf("%s: effects %q, want %q", tc.name, effects, tc.effects)
		}
		if st := Snapshot("d", "v", s, t0); st.LastResult.Retrying != tc.retrying {
			t.Errorf("%s: the status's last_result.retrying is %v", tc.name, st.LastResult.Retrying)
		}
	}
}
