package backoff

import (
	"context"
	"slices"
	"testing"
	"time"
)

func TestWindow(t *testing.T) {
	p := Policy{Base: 15 * time.Second, Max: 5 * time.Minute}
	tests := []struct {
		n    int
		want time.Duration
	}{
		{-1, 15 * time.Second},
		{0, 15 * time.Second},
		{1, 30 * time.Second},
		{2, 60 * time.Second},
		{3, 120 * time.Second},
		{4, 240 * time.Second},
		{5, 5 * time.Minute},
		{6, 5 * time.Minute},
		{1000, 5 * time.Minute},
	}
	for _, tt := range tests {
		if got := p.Window(tt.n); got != tt.want {
			t.Errorf("Window(%d) = %v, want %v", tt.n, got, tt.want)
		}
	}
}

func TestDelayFullJitter(t *testing.T) {
	p := Policy{Base: 100 * time.Millisecond, Max: time.Second}
	tests := []struct {
		name string
		n    int
		r    float64
		want time.Duration
	}{
		{"zero rand gives zero", 0, 0, 0},
		{"half of first cap", 0, 0.5, 50 * time.Millisecond},
		{"half of second cap", 1, 0.5, 100 * time.Millisecond},
		{"capped at max", 10, 0.5, 500 * time.Millisecond},
		{"rand just below 1 stays below cap", 0, 0.9999999999999999, 100*time.Millisecond - 1},
		{"rand 1 clamped below cap", 2, 1, 400*time.Millisecond - 1},
		{"negative rand clamped to 0", 2, -3, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := p.Delay(tt.n, tt.r); got != tt.want {
				t.Errorf("Delay(%d, %v) = %v, want %v", tt.n, tt.r, got, tt.want)
			}
		})
	}
}

// The window only grows, up to Max, however many retries (no overflow
// into a negative or shrinking window).
func TestWindowNeverShrinks(t *testing.T) {
	p := Policy{Base: time.Second, Max: time.Minute}
	prev := time.Duration(0)
	for n := range 2000 {
		w := p.Window(n)
		if w < prev || w > p.Max {
			t.Fatalf("Window(%d) = %v after %v (max %v)", n, w, prev, p.Max)
		}
		prev = w
	}
	if prev != p.Max {
		t.Fatalf("Window(1999) = %v, want the cap", prev)
	}
}

// Draws spread over the whole window and never reach past it.
func TestDrawSpreads(t *testing.T) {
	p := Policy{Base: time.Second, Max: time.Minute}
	var waits []time.Duration
	for range 200 {
		w := p.Draw(0)
		if w < 0 || w >= time.Second {
			t.Fatalf("Draw(0) = %v, outside [0, 1s)", w)
		}
		waits = append(waits, w)
	}
	if lo, hi := slices.Min(waits), slices.Max(waits); hi-lo < 500*time.Millisecond {
		t.Fatalf("200 draws within [%v, %v]: not spread over the window", lo, hi)
	}
}

// Wait takes the server's floor within the cap; Pause is bounded by Max
// and ends with the context.
func TestWaitAndPause(t *testing.T) {
	var slept []time.Duration
	rec := func(ctx context.Context, d time.Duration) error { slept = append(slept, d); return ctx.Err() }
	p := Policy{Base: 10 * time.Millisecond, Max: 25 * time.Millisecond, Sleep: rec, Rand: func() float64 { return 0.5 }}
	for _, floor := range []time.Duration{0, 20 * time.Millisecond, time.Hour} {
		if err := p.Wait(t.Context(), 0, floor); err != nil {
			t.Fatal(err)
		}
	}
	if want := []time.Duration{5 * time.Millisecond, 20 * time.Millisecond, 25 * time.Millisecond}; !slices.Equal(slept, want) {
		t.Fatalf("slept %v, want %v", slept, want)
	}

	timer := Policy{Base: time.Millisecond, Max: 20 * time.Millisecond}
	start := time.Now()
	if err := timer.Pause(t.Context(), time.Hour); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d >= time.Minute {
		t.Fatalf("Pause(1h) with Max 20ms took %v", d)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := (Policy{Base: time.Hour, Max: time.Hour}).Pause(ctx, time.Hour); err != context.Canceled {
		t.Fatalf("Pause after cancel = %v, want context.Canceled", err)
	}
}
