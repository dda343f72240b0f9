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
