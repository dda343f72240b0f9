package agent

import (
	"context"
	"time"

	"github.com/otad/otad/backoff"
)

// DefaultRetryDelay is [retry] delay's default (docs/contract/config.md).
const DefaultRetryDelay = 15 * time.Second

// retries is the loop's one retry timer (RetryLater) and the envelope of
// the offer last taken, which a retry checks again before it starts.
type retries struct {
	timer  <-chan time.Time
	stop   func() bool
	target *Target
	key    string // the offer raw is
	raw    []byte
}

// offered remembers the envelope of the offer handed to the machine.
func (r *retries) offered(t Target, raw []byte) {
	r.key, r.raw = t.Key(), raw
}

// retryLater arms the timer for t: a wait drawn between half and all of
// RetryDelay·2^(Try−1), so a fleet that failed together does not come back
// together. It replaces an armed one: only the latest ending retries.
func (a *Agent) retryLater(t Target) {
	if a.retries.stop != nil {
		a.retries.stop()
	}
	p := backoff.Policy{Base: a.cfg.RetryDelay, Max: a.cfg.RetryDelay << 10, Rand: a.cfg.Rand}
	n := max(t.Try-1, 0)
	d := p.Window(n)/2 + p.Draw(n)/2
	tm := time.NewTimer(d)
	a.retries.timer, a.retries.stop, a.retries.target = tm.C, tm.Stop, &t
	a.log.Info("download failed; retrying later", "id", t.ID, "retry", t.Try, "of", a.cfg.Policy.RetryAttempts, "after", d.Round(time.Second))
}

// retryNow runs when the timer ran out: the offer is checked again (keys,
// floor and clock of this moment) and the machine decides whether it starts.
func (a *Agent) retryNow(ctx context.Context) error {
	t := a.retries.target
	a.retries.timer, a.retries.stop, a.retries.target = nil, nil, nil
	if t == nil {
		return nil
	}
	if a.retries.key != t.Key() || a.retries.raw == nil {
		a.log.Warn("retry dropped: the offer's envelope is no longer held", "id", t.ID)
		return a.apply(ctx, EvRetry{Target: *t, Dropped: true})
	}
	c, err := a.d.Checker.Check(a.retries.raw, a.facts())
	if err != nil {
		a.log.Warn("retry refused on its re-check", "id", t.ID, "err", err)
		if err := a.apply(ctx, EvRefused{Outcome: refusal(err, *t), Time: a.now()}); err != nil {
			return err
		}
		return a.apply(ctx, EvRetry{Target: *t, Dropped: true})
	}
	c.Try, c.Retry = t.Try, t.Retry
	return a.apply(ctx, EvRetry{Target: c})
}

// stopRetry disarms the timer (the loop ends).
func (a *Agent) stopRetry() {
	if a.retries.stop != nil {
		a.retries.stop()
	}
	a.retries.timer, a.retries.stop, a.retries.target = nil, nil, nil
}
