package mqtt

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/otad/otad/internal/testkit/mosquittotest"
)

func TestBackoffWindows(t *testing.T) {
	tests := []struct {
		b    Backoff
		want []time.Duration // windows after 0, 1, 2, … failures
	}{
		{Backoff{}, []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second, 2 * time.Minute, 2 * time.Minute}},
		{Backoff{First: time.Second, Max: 3 * time.Second}, []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 3 * time.Second}},
		{Backoff{First: time.Minute, Max: time.Second}, []time.Duration{time.Minute, 2 * time.Minute, 2 * time.Minute}}, // Max below First: the default
	}
	for _, tt := range tests {
		p := tt.b.policy()
		for n, want := range tt.want {
			if got := p.Window(n); got != want {
				t.Errorf("%+v.Window(%d) = %v, want %v", tt.b, n, got, want)
			}
		}
		if got := p.Window(1000); got != p.Max {
			t.Errorf("%+v.Window(1000) = %v, want the cap", tt.b, got)
		}
	}
	// Waits are drawn over the whole window: not all alike, never past it.
	p := Backoff{First: time.Second}.policy()
	var waits []time.Duration
	for range 200 {
		w := p.Draw(0)
		if w < 0 || w >= time.Second {
			t.Fatalf("Wait(0) = %v, outside [0, 1s)", w)
		}
		waits = append(waits, w)
	}
	if lo, hi := slices.Min(waits), slices.Max(waits); hi-lo < 500*time.Millisecond {
		t.Fatalf("200 waits within [%v, %v]: not spread over the window", lo, hi)
	}
}

// When the broker restarts, a fleet's devices reconnect spread over the
// first window, not in the same instant (issue 11's reconnect storm).
func TestReconnectsAreSpread(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{Quiet: true})
	const n, first = 20, 2 * time.Second
	var conns []*Conn
	for i := range n {
		cfg := Config{Broker: b.URL, DeviceID: fmt.Sprintf("gw-%d", i), Reconnect: Backoff{First: first, Max: 4 * first}}
		conns = append(conns, dial(t, cfg, newOffers()))
	}
	for _, d := range conns {
		waitFor(t, "first connect", 10*time.Second, d.Connected)
	}
	b.Restart() // the devices see the connection drop, and the broker is back at once
	lost := time.Now()
	back := make([]time.Duration, n)
	for pending := n; pending > 0; time.Sleep(5 * time.Millisecond) {
		if time.Since(lost) > 30*time.Second {
			t.Fatalf("%d devices not back within 30s", pending)
		}
		for i, d := range conns {
			if back[i] == 0 && time.Since(lost) > 100*time.Millisecond && d.Connected() {
				back[i] = time.Since(lost)
				pending--
			}
		}
	}
	slices.Sort(back)
	// 20 draws from [0, 2s): the chance they all fall within 0.5s is about 4e-11.
	if spread := back[n-1] - back[0]; spread < 500*time.Millisecond {
		t.Fatalf("%d devices reconnected within %v of each other (%v … %v): not spread", n, spread, back[0], back[n-1])
	}
	t.Logf("reconnects from %v to %v after the restart", back[0].Round(time.Millisecond), back[n-1].Round(time.Millisecond))
}
