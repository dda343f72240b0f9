package slots

import (
	"testing"
	"time"
)

func TestBackoffCap(t *testing.T) {
	p := backoff{Base: 15 * time.Second, Max: 5 * time.Minute, Factor: 2}
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
		if got := p.Cap(tt.n); got != tt.want {
			t.Errorf("Cap(%d) = %v, want %v", tt.n, got, tt.want)
		}
	}
}

func TestBackoffDelayFullJitter(t *testing.T) {
	p := backoff{Base: 100 * time.Millisecond, Max: time.Second, Factor: 2}
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

func TestBackoffFactorBelowOneDoesNotShrink(t *testing.T) {
	p := backoff{Base: time.Second, Max: time.Minute, Factor: 0.5}
	if got := p.Cap(3); got != time.Second {
		t.Errorf("Cap(3) = %v, want 1s", got)
	}
}
