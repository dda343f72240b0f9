package mqtt

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/otad/otad/internal/testkit/mosquittotest"
)

// A session publishes retained to many topics at once, and Sync tells
// "nothing retained" from "not arrived yet".
func TestSessionPublishAndSync(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{})
	cfg := Config{Broker: b.URL}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	pub, err := Open(ctx, cfg, nil, func(Message) {})
	if err != nil {
		t.Fatal(err)
	}
	topics := make([]string, 500)
	for i := range topics {
		topics[i] = fmt.Sprintf("ota/devices/d%03d/desired", i)
	}
	if err := pub.PublishRetained(ctx, []byte("offer"), topics...); err != nil {
		t.Fatal(err)
	}
	pub.Close()
	if got := retainedVia(t, b, "ota/devices/d499/desired"); got != "1 1 offer" {
		t.Errorf("retained on the last topic: %q", got)
	}

	var mu sync.Mutex
	seen := map[string]string{}
	s, err := Open(ctx, cfg, map[string]byte{"ota/devices/d007/desired": 1, "ota/rollouts/none/state": 1}, func(m Message) {
		mu.Lock()
		seen[m.Topic] = string(m.Payload)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || seen["ota/devices/d007/desired"] != "offer" {
		t.Errorf("after Sync the handler has seen %v, want exactly d007's retained offer", seen)
	}
}

// Sync's waits (waitArriving) last while messages keep arriving, give up
// after a connect timeout in which nothing arrived (also when nothing
// ever did), and return the outcome once done.
func TestWaitArriving(t *testing.T) {
	const limit = time.Second // arrivals every 50 ms: far inside it, even on a loaded machine
	failed := fmt.Errorf("refused by the broker")
	for _, tc := range []struct {
		name    string
		arrive  time.Duration // a message this often (0: none)
		doneAt  time.Duration // done closed this late (0: never)
		result  error
		wantErr error
		beside  bool // the messages arrive on another session (Session.Beside)
	}{
		{name: "nothing ever arrives", wantErr: errTimeout},
		{name: "messages keep arriving past the limit, then done", arrive: 50 * time.Millisecond, doneAt: 3 * limit},
		{name: "done with an error", doneAt: limit / 3, result: failed, wantErr: failed},
		{name: "arrivals stop, done never comes", arrive: 50 * time.Millisecond, wantErr: errTimeout},
		{name: "messages keep arriving beside it past the limit, then done", arrive: 50 * time.Millisecond, doneAt: 3 * limit, beside: true},
		{name: "arrivals beside it stop, done never comes", arrive: 50 * time.Millisecond, beside: true, wantErr: errTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := newQueue(func(Message) {})
			q.start()
			defer q.close()
			s := &Session{cfg: Config{ConnectTimeout: limit}, q: q}
			if tc.beside {
				other := &Session{q: newQueue(func(Message) {})}
				other.q.start()
				defer other.q.close()
				s.Beside(other)
				q = other.q
			}
			done := make(chan struct{})
			start := time.Now()
			if tc.doneAt > 0 {
				time.AfterFunc(tc.doneAt, func() { close(done) })
			}
			if tc.arrive > 0 {
				stop := time.After(2 * limit) // without done: arrivals stop, then the limit
				if tc.doneAt > 0 {
					stop = time.After(tc.doneAt)
				}
				go func() {
					for tick := time.NewTicker(tc.arrive); ; {
						select {
						case <-stop:
							tick.Stop()
							return
						case <-tick.C:
							q.push(item{msg: Message{Topic: "ota/devices/d/status", Payload: []byte("{}")}})
						}
					}
				}()
			}
			var result func() error
			if tc.result != nil {
				result = func() error { return tc.result }
			}
			err := s.waitArriving(context.Background(), done, result)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("waitArriving: %v, want %v", err, tc.wantErr)
			}
			if tc.doneAt > limit && err == nil && time.Since(start) < tc.doneAt {
				t.Fatalf("returned after %v, before done", time.Since(start))
			}
		})
	}
}
