package fleet_test

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/internal/testkit/signer"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/sim/fleet"
)

// connects records when each agent logged "mqtt: connected" (the
// agents' own timestamps: mosquitto's log to a pipe is buffered, its last
// lines arrive only when it exits).
type connects struct {
	mu sync.Mutex
	at map[string][]time.Time
}

// handler is a slog.Handler that hands connect records to c.
type handler struct {
	c      *connects
	device string
}

func (h handler) Enabled(context.Context, slog.Level) bool { return true }

func (h handler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "mqtt: connected" {
		h.c.mu.Lock()
		h.c.at[h.device] = append(h.c.at[h.device], r.Time)
		h.c.mu.Unlock()
	}
	return nil
}

func (h handler) WithAttrs(as []slog.Attr) slog.Handler {
	for _, a := range as {
		if a.Key == "device" {
			h.device = a.Value.String()
		}
	}
	return h
}

func (h handler) WithGroup(string) slog.Handler { return h }

// since returns, for each agent, its first connect after t.
func (c *connects) since(t time.Time) map[string]time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]time.Time{}
	for d, ts := range c.at {
		for _, at := range ts {
			if at.After(t) {
				out[d] = at
				break
			}
		}
	}
	return out
}

// The reconnect storm: when the broker restarts under 200 agents, their
// reconnects spread over seconds (the agents' jittered backoff) instead of
// arriving in the same second.
func TestBrokerRestartReconnectsAreSpread(t *testing.T) {
	if testing.Short() {
		t.Skip("a broker restart under 200 agents")
	}
	const n = 200
	b := mosquittotest.Start(t, mosquittotest.Options{Quiet: true})
	_, keys := signer.Trusted(t)
	rec := &connects{at: map[string][]time.Time{}}
	f, err := fleet.New(fleet.Options{Broker: b.URL, Devices: n, KeysDir: keys, Spread: time.Second, Logger: slog.New(handler{c: rec})})
	if err != nil {
		t.Fatal(err)
	}
	_, view := run(t, f, b.URL)
	wait(t, view, n, "idle", func(st ota.Status) bool { return st.State == ota.Idle })

	restarted := time.Now()
	b.Restart()
	var back map[string]time.Time
	for back = rec.since(restarted); len(back) < n; back = rec.since(restarted) {
		if time.Since(restarted) > 60*time.Second {
			t.Fatalf("%d of %d agents reconnected within 60s", len(back), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	perSecond := map[int]int{}
	for _, at := range back {
		perSecond[int(at.Sub(restarted)/time.Second)]++
	}
	var hist []string
	busiest := 0
	for sec := range slices.Max(slices.Collect(maps.Keys(perSecond))) + 1 {
		hist = append(hist, fmt.Sprintf("%2d–%2ds %3d %s", sec, sec+1, perSecond[sec], strings.Repeat("#", perSecond[sec]/2)))
		busiest = max(busiest, perSecond[sec])
	}
	t.Logf("reconnects per second after the broker restart:\n%s", strings.Join(hist, "\n"))
	// Drawn from a 5 s window: about 40 a second. All within a second or
	// two would be the storm.
	if busiest > n/3 || len(hist) < 4 {
		t.Fatalf("%d agents reconnected over %d seconds, %d in the busiest: not spread", n, len(hist), busiest)
	}
}
