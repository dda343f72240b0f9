package mqtt

import (
	"context"
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
