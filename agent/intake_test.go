package agent

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/otad/otad/ota"
)

// lockedBuffer is a log destination the test reads while the agent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// An offer delivered again after it ended is logged as already ended, not
// accepted: it changes nothing, and the log must not say it starts.
func TestRedeliveredOfferLogsAlreadyEnded(t *testing.T) {
	var logs lockedBuffer
	a, err := New(Config{DeviceID: "dev-1", Policy: Policy{MaxRestarts: 2}, AgentVersion: "test", Logger: slog.New(slog.NewTextHandler(&logs, nil))}, Deps{
		Store: &memStore{}, Bootloader: &fakeBoot{}, Installer: &fakeInstaller{delay: time.Millisecond, code: "hash_mismatch"},
		Checker: jsonChecker{}, Rebooter: &fakeReboot{}, Health: okHealth{},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx, "A", "boot-1") }()
	defer func() { cancel(); <-done }()
	raw := offerJSON(tgt("n", 1))
	if o, err := a.Install(ctx, raw); err != nil || o.Result != ota.ResultFailed {
		t.Fatalf("install: %+v, %v", o, err)
	}
	if n := strings.Count(logs.String(), `msg="offer accepted"`); n != 1 {
		t.Fatalf("%d offers accepted:\n%s", n, logs.String())
	}
	a.Offer("ota/devices/dev-1/desired", raw)
	for !strings.Contains(logs.String(), `msg="offer already ended" id=rel-n result=failed`) {
		if ctx.Err() != nil {
			t.Fatalf("no 'offer already ended' logged:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := strings.Count(logs.String(), `msg="offer accepted"`); n != 1 {
		t.Errorf("the redelivered offer was logged as accepted:\n%s", logs.String())
	}
}
