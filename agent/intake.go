package agent

import (
	"context"
	"log/slog"
)

// takeOffers checks every queued offer, reports the refused ones, and hands
// the newest valid one to the machine: the older ones of the same batch are
// superseded before they could start anything.
func (a *Agent) takeOffers(ctx context.Context) error {
	items := a.inbox.take()
	var newest *Target
	var newestItem item
	local := map[string]bool{} // offers a person handed over, by key
	// Waiters join after the refusals of this batch are applied, so those
	// steps do not answer them before their offer is taken.
	var waiting []*waiter
	for i, it := range items {
		var t Target
		err := it.refused
		if err == nil {
			f := a.facts()
			f.PayloadGiven = it.given
			t, err = a.d.Checker.Check(it.raw, f)
			t.Envelope, t.PayloadGiven = it.raw, it.given
		}
		if err != nil {
			if aerr := a.refuse(ctx, it, t, err); aerr != nil {
				a.inbox.requeue(items[i+1:])
				return aerr
			}
			continue
		}
		if it.reply != nil {
			waiting = append(waiting, &waiter{sha: t.SHA256(), key: t.Key(), reply: it.reply})
			local[t.Key()] = true
		}
		if e, done := a.state.ended(&t); done {
			// Authentic, but it changes nothing: the machine says so too.
			a.log.Info("offer already ended", "id", t.ID, "result", e.Result, "sha256", t.SHA256(), "source", it.name())
		} else {
			a.log.Info("offer accepted", "id", t.ID, "version", t.Version, "sha256", t.SHA256(), "source", it.name())
		}
		// The same offer handed over by a person counts as theirs (its payload).
		if newest == nil || newer(t, *newest) || (t.Key() == newest.Key() && it.reply != nil) {
			newest, newestItem = &t, it
		}
	}
	if newest == nil {
		return nil
	}
	a.waiters = append(a.waiters, waiting...)
	a.retries.offered(*newest, newestItem.raw)
	return a.apply(ctx, EvOffer{Target: *newest, Local: local[newest.Key()]})
}

// newer orders offers by issued_at, then digest, so every device picks the
// same one among offers issued at the same instant.
func newer(a, b Target) bool {
	if !a.IssuedAt.Equal(b.IssuedAt) {
		return a.IssuedAt.After(b.IssuedAt)
	}
	return a.SHA256() > b.SHA256()
}

func (a *Agent) refuse(ctx context.Context, it item, t Target, err error) error {
	o := refusal(err, t)
	// A waited-for install's caller reports the refusal itself (otad install
	// prints it): a warning too would say it twice.
	level := slog.LevelWarn
	if it.reply != nil {
		level = slog.LevelInfo
	}
	a.log.Log(ctx, level, "offer refused", "code", o.Code, "err", err, "source", it.name())
	aerr := a.apply(ctx, EvRefused{Outcome: o, Time: a.now()})
	if it.reply != nil {
		it.reply <- o
	}
	return aerr
}
