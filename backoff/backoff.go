package backoff

import (
	"context"
	"math"
	"math/rand/v2"
	"time"
)

// Policy is exponential backoff with full jitter
// (https://aws.amazon.com/blogs/architecture/exponential-backoff-and-jitter/):
// the n-th wait (n from 0) is drawn uniformly from [0, Window(n)), the
// window starting at Base and doubling up to Max. Full jitter spreads a
// fleet's retries, so that devices that failed together do not come back
// together. Zero Base or Max are invalid: callers fill in their defaults
// first.
type Policy struct {
	Base time.Duration // the first window
	Max  time.Duration // the window never grows past this
	// Attempts is how many tries a caller makes before it gives up; 0 for
	// a caller that retries as long as it runs (the MQTT connection).
	Attempts int
	// Sleep waits d or until ctx ends; nil uses a timer (tests record).
	Sleep func(ctx context.Context, d time.Duration) error
	// Rand returns a uniform number in [0, 1); nil uses math/rand/v2.
	Rand func() float64
}

// Window returns min(Max, Base*2^n), the range of the n-th wait (n < 0
// counts as 0).
func (p Policy) Window(n int) time.Duration {
	n = max(n, 0)
	// Float math cannot overflow into a negative duration the way repeated
	// integer doubling can; the comparison clamps huge exponents to Max.
	c := float64(p.Base) * math.Pow(2, float64(n))
	if c >= float64(p.Max) || math.IsInf(c, 1) || math.IsNaN(c) {
		return p.Max
	}
	return time.Duration(c)
}

// Delay returns the n-th wait given r, a uniform number in [0, 1). Out of
// range r is clamped, so the result always lies in [0, Window(n)).
func (p Policy) Delay(n int, r float64) time.Duration {
	c := p.Window(n)
	if c <= 0 {
		return 0
	}
	if r < 0 || math.IsNaN(r) {
		r = 0
	}
	d := time.Duration(r * float64(c))
	if d >= c {
		d = c - 1
	}
	return d
}

// Draw draws the n-th wait.
func (p Policy) Draw(n int) time.Duration {
	r := p.Rand
	if r == nil {
		r = rand.Float64
	}
	return p.Delay(n, r())
}

// Pause waits d, but never longer than Max, or until ctx ends (its error).
func (p Policy) Pause(ctx context.Context, d time.Duration) error {
	d = min(d, p.Max)
	if p.Sleep != nil {
		return p.Sleep(ctx, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Wait draws the n-th wait and pauses for it; floor (a server's
// Retry-After) lengthens it, within Max.
func (p Policy) Wait(ctx context.Context, n int, floor time.Duration) error {
	return p.Pause(ctx, max(p.Draw(n), floor))
}
