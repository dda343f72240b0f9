package mqtt

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/otad/otad/internal/testkit/brokertest"
	"github.com/otad/otad/internal/testkit/mosquittotest"
)

// A connection on which the broker stopped answering (it stays open; its
// keepalive would notice only after 30 s and more): the publish that
// times out on it drops it, and the session dials again, so the next
// publish goes out on a new connection well before the keepalive fires.
// Publish and PublishRetained both.
func TestStalledConnectionIsDropped(t *testing.T) {
	for _, tc := range []struct {
		name    string
		publish func(context.Context, *Session, string) error
	}{
		{"Publish", func(ctx context.Context, s *Session, p string) error { return s.Publish(ctx, "ota/x", []byte(p)) }},
		{"PublishRetained", func(ctx context.Context, s *Session, p string) error {
			return s.PublishRetained(ctx, []byte(p), "ota/x", "ota/y")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := mosquittotest.Start(t, mosquittotest.Options{Quiet: true})
			p := brokertest.NewProxy(t, b.URL)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cfg := Config{Broker: p.URL, ConnectTimeout: 2 * time.Second, Reconnect: Backoff{First: 200 * time.Millisecond, Max: time.Second}}
			s, err := Open(ctx, cfg, map[string]byte{"ota/x": 1}, func(Message) {})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			// What reaches the broker, seen there directly (not through the proxy).
			seen := observe(t, Config{Broker: b.URL}, "", "ota/x")
			if err := tc.publish(ctx, s, "one"); err != nil {
				t.Fatal(err)
			}
			p.Stall()
			stalledAt := time.Now()
			if err := tc.publish(ctx, s, "two"); !errors.Is(err, errTimeout) {
				t.Fatalf("a publish on the stalled connection: %v, want a timeout", err)
			}
			for {
				err := tc.publish(ctx, s, "three")
				if err == nil {
					break
				}
				// Keepalive (30 s) and its PINGRESP wait would have dropped
				// the connection by now without the fix.
				if time.Since(stalledAt) > 25*time.Second {
					t.Fatalf("still no publish 25 s after the connection stalled: %v", err)
				}
				time.Sleep(100 * time.Millisecond)
			}
			nextWith(t, seen, "ota/x", "three", 5*time.Second)
		})
	}
}
