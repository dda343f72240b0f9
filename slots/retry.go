package slots

import (
	"context"
	"math"
	"math/rand/v2"
	"time"
)

// Retry is the retry policy for transient download errors (docs/contract/installing.md): up to
// Attempts tries of a request that makes no progress, sleeping a full-jitter
// delay rand[0, min(Max, Base*2^n)) before the n-th retry. A request that
// delivers bytes before failing resets the count, since it resumes from there.
// Zero fields take the defaults of docs/contract/config.md: 3 attempts, 15s base, 5m cap.
type Retry struct {
	Attempts  int
	Base, Max time.Duration
	// Sleep waits d or until ctx ends; nil uses a real timer.
	Sleep func(ctx context.Context, d time.Duration) error
	// Rand returns a uniform number in [0, 1); nil uses math/rand/v2.
	Rand func() float64
}

// docs/contract/installing.md defaults.
const (
	defaultAttempts = 3
	defaultBase     = 15 * time.Second
	defaultMax      = 5 * time.Minute
	backoffFactor   = 2
)

func (r Retry) withDefaults() Retry {
	if r.Attempts <= 0 {
		r.Attempts = defaultAttempts
	}
	if r.Base <= 0 {
		r.Base = defaultBase
	}
	if r.Max <= 0 {
		r.Max = defaultMax
	}
	if r.Max < r.Base {
		r.Max = r.Base
	}
	if r.Sleep == nil {
		r.Sleep = sleepCtx
	}
	if r.Rand == nil {
		r.Rand = rand.Float64
	}
	return r
}

func (r Retry) policy() backoff {
	return backoff{Base: r.Base, Max: r.Max, Factor: backoffFactor}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// backoff describes the growth of the delay cap: exponential backoff with
// full jitter (https://aws.amazon.com/blogs/architecture/exponential-backoff-and-jitter/),
// the n-th retry sleeps a uniformly random time in [0, min(Max, Base*Factor^n)).
// Full jitter spreads a fleet's retries so that devices that failed together
// do not hammer the server together. Zero fields are invalid;
// callers fill in their defaults first.
type backoff struct {
	Base   time.Duration // cap of the first retry
	Max    time.Duration // the cap never grows past this
	Factor float64       // growth of the cap per retry (2 for doubling)
}

// Cap returns min(Max, Base*Factor^n) for the n-th retry (n counts from 0).
func (p backoff) Cap(n int) time.Duration {
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
func (p backoff) Delay(n int, r float64) time.Duration {
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
