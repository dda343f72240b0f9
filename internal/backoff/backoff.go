// Package backoff computes exponential backoff delays with full jitter
// (https://aws.amazon.com/blogs/architecture/exponential-backoff-and-jitter/):
// the n-th retry sleeps a uniformly random time in [0, min(Max, Base*Factor^n)).
// Full jitter spreads a fleet's retries so that devices that failed together
// do not hammer the server together.
package backoff

import (
	"math"
	"time"
)

// Policy describes the growth of the delay cap. Zero fields are invalid;
// callers fill in their defaults first.
type Policy struct {
	Base   time.Duration // cap of the first retry
	Max    time.Duration // the cap never grows past this
	Factor float64       // growth of the cap per retry (2 for doubling)
}

// Cap returns min(Max, Base*Factor^n) for the n-th retry (n counts from 0).
func (p Policy) Cap(n int) time.Duration {
	if n < 0 {
		n = 0
	}
	f := p.Factor
	if f < 1 {
		f = 1
	}
	// Float math cannot overflow into a negative duration the way repeated
	// integer doubling can; the comparison clamps huge exponents to Max.
	c := float64(p.Base) * math.Pow(f, float64(n))
	if c >= float64(p.Max) || math.IsInf(c, 1) || math.IsNaN(c) {
		return p.Max
	}
	return time.Duration(c)
}

// Delay returns the full-jitter delay for the n-th retry given r, a uniform
// random number in [0, 1). Out-of-range r is clamped so that the result always
// lies in [0, Cap(n)).
func (p Policy) Delay(n int, r float64) time.Duration {
	c := p.Cap(n)
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
