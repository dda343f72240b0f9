package fetch

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/otad/otad/backoff"
	"github.com/otad/otad/ota"
)

// The retry defaults of docs/contract/config.md ([download] retries,
// backoff, max_backoff).
const (
	defaultAttempts = 3
	defaultBase     = 15 * time.Second
	defaultMax      = 5 * time.Minute
)

// WithRetryDefaults is the retry policy for transient download errors
// (docs/contract/installing.md): up to Attempts tries of a request the
// server fails without progress, a full-jitter wait before each retry. A
// request that delivers bytes before failing resets the count, since it
// resumes from there. Zero fields take the defaults: 3 attempts, 15s base,
// 5m cap; a cap below the base is the base.
func WithRetryDefaults(p backoff.Policy) backoff.Policy {
	if p.Attempts <= 0 {
		p.Attempts = defaultAttempts
	}
	if p.Base <= 0 {
		p.Base = defaultBase
	}
	if p.Max <= 0 {
		p.Max = defaultMax
	}
	if p.Max < p.Base {
		p.Max = p.Base
	}
	return p
}

// Retrier judges a download's failures one after the other
// (docs/contract/installing.md, "Networks that come and go"). A failure of
// the network (no answer from the server: refused, reset, DNS, timeouts,
// stalls, a body cut short) is no verdict: the download waits with jittered
// backoff, the window growing to the policy's cap, and tries again for as
// long as the offer is valid (Until), saying what it waits for. A failure
// the server answered (5xx, 408, 429) is retried Attempts times without
// progress, then final. Anything else is final at once.
type Retrier struct {
	policy  backoff.Policy
	until   time.Time
	waiting func(*ota.Waiting)

	counted bool // network failures count as attempts too (Counted)

	fails  int       // server failures since the last progress
	outage int       // network failures since the last progress
	since  time.Time // when the network was first missed, zero while it works
}

// NewRetrier is the retrier of r's download; each loop that retries on its
// own (a lane of a chunked install) has its own.
func NewRetrier(r Request) *Retrier {
	return &Retrier{policy: WithRetryDefaults(r.Retry), until: r.Until, waiting: r.Waiting}
}

// Counted makes network failures count as attempts, as the server's do:
// for a download that is an aid, given up for another source rather than
// waited for (a chunked install's delta file).
func (t *Retrier) Counted() *Retrier {
	t.counted = true
	return t
}

// Progress says the download delivered bytes: the counts start again, and a
// wait for the network that was shown is over.
func (t *Retrier) Progress() {
	t.fails = 0
	t.outage = 0
	t.Answered()
}

// Answered says the server answered: a wait for the network that was shown
// is over, though the counts go on until bytes arrive.
func (t *Retrier) Answered() {
	if !t.since.IsZero() {
		t.since = time.Time{}
		if t.waiting != nil {
			t.waiting(nil)
		}
	}
}

// Retry waits before the next try after err and returns nil, or returns the
// final error: err when it is final, the context's error when it ended, and
// download_failed when the attempts are spent or the offer expired.
func (t *Retrier) Retry(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	var te *TransientError
	if !errors.As(err, &te) {
		return err
	}
	if te.Status != 0 || t.counted {
		t.fails++
		if t.fails >= t.policy.Attempts {
			return ota.Wrap(ota.CodeDownloadFailed, fmt.Errorf("giving up after %d attempts: %w", t.fails, err))
		}
		// The server's Retry-After is a floor, within the cap.
		return t.policy.Wait(ctx, t.fails-1, te.After)
	}
	now := time.Now()
	if !t.until.IsZero() && !now.Before(t.until) {
		return ota.Wrap(ota.CodeDownloadFailed, fmt.Errorf("the offer expired at %s while the download waited for the network: %w",
			t.until.UTC().Format(time.RFC3339), err))
	}
	if t.since.IsZero() {
		t.since = now
	}
	d := t.policy.Draw(t.outage)
	t.outage++
	if !t.until.IsZero() {
		d = min(d, t.until.Sub(now))
	}
	if t.waiting != nil {
		t.waiting(&ota.Waiting{For: ota.WaitNetwork, Error: err.Error(), Since: t.since.UTC(), NextTry: now.Add(d).UTC()})
	}
	return t.policy.Pause(ctx, d)
}
