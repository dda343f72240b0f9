package agent

import (
	"context"
	"time"

	"github.com/otad/otad/ota"
)

// clockFloor is the earliest the checks' clock can be (docs/contract/checks.md): the newest
// authenticated time the agent knows, the build time or the newest accepted
// issued_at. The local clock alone never moves it: one boot with the clock
// at 2099 must not make every offer expired.
func (a *Agent) clockFloor() time.Time {
	return clockFloor(a.cfg.BuildTime, a.state.NewestIssuedAt)
}

func clockFloor(f time.Time, ts ...time.Time) time.Time {
	for _, t := range ts {
		if t.After(f) {
			f = t
		}
	}
	return f
}

// FactsOf are the facts the checks would judge an offer against on a
// device whose journal holds s, booted from booted, built at buildTime:
// what `otad info` judges by without running the agent.
func FactsOf(s State, booted ota.Slot, buildTime time.Time) Facts {
	return Facts{SecurityFloor: s.SecurityFloor, NewestIssuedAt: s.NewestIssuedAt,
		InactiveSlot: booted.Other(), ClockFloor: clockFloor(buildTime, s.NewestIssuedAt)}
}

// now is the clock, never earlier than the floor.
func (a *Agent) now() time.Time {
	now, floor := a.d.Clock.Now(), a.clockFloor()
	if now.Before(floor) {
		return floor
	}
	return now
}

// facts are what the offer checks judge an offer against, now.
func (a *Agent) facts() Facts {
	return Facts{SecurityFloor: a.state.SecurityFloor, NewestIssuedAt: a.state.NewestIssuedAt,
		InactiveSlot: a.state.Booted.Other(), ClockFloor: a.clockFloor()}
}

// recheckPending runs the offer checks on the pending offer again, with the
// keys, floor and clock of this moment, and steps with the verdict.
func (a *Agent) recheckPending(ctx context.Context) error {
	p := a.state.Pending
	if p == nil || a.state.Phase != ota.Idle {
		return nil
	}
	t, err := a.d.Checker.Check(p.Envelope, a.facts())
	if err != nil {
		a.log.Warn("pending offer refused on its re-check", "id", p.ID, "err", err)
		return a.apply(ctx, EvRefused{Outcome: refusal(err, *p), Time: a.now(), Pending: true})
	}
	t.Envelope = p.Envelope
	a.retries.offered(t, p.Envelope)
	return a.apply(ctx, EvPendingOffer{Target: t})
}

// refusal is the outcome of an offer refused with err; t names the offer
// when it could be read.
func refusal(err error, t Target) ota.Outcome {
	code := ota.CodeOf(err)
	if code == "" {
		code = ota.CodeBadEnvelope
	}
	o := ota.Outcome{Result: ota.ResultRejected, Code: code, Message: err.Error()}
	if t.Payload.SHA256 != "" {
		o.ID, o.SHA256 = t.ID, t.SHA256()
	}
	o.ManifestSHA256 = t.ManifestSHA256
	return o
}

// Dropped reports a message on the network source key that was dropped
// unread for being over the envelope limit: a too_large refusal.
func (a *Agent) Dropped(key string, size int) {
	a.inbox.putRefused(key, ota.Errorf(ota.CodeTooLarge, "message of %d bytes on %s dropped unread (limit %d)", size, key, ota.MaxEnvelopeSize))
}
