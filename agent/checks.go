package agent

import (
	"context"
	"time"

	"github.com/otad/otad/ota"
)

// seenAhead bounds how far past the newest trusted time (build time, newest
// accepted issued_at) a clock reading may push LastSeen: a clock that jumped
// to 2099 once must not make every offer expired for good.
const seenAhead = 366 * 24 * time.Hour

// clockFloor is the earliest the checks' clock can be (docs/contract/checks.md): the newest
// of the build time, the newest accepted issued_at and the last time seen.
func (a *Agent) clockFloor() time.Time {
	return clockFloor(a.cfg.BuildTime, a.state.NewestIssuedAt, a.persisted.LastSeen)
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
		InactiveSlot: booted.Other(), ClockFloor: clockFloor(buildTime, s.NewestIssuedAt, s.LastSeen)}
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

// stampSeen sets the journal's LastSeen to now, bounded by seenAhead.
func (a *Agent) stampSeen(s State) State {
	now := a.now()
	trusted := a.cfg.BuildTime
	if s.NewestIssuedAt.After(trusted) {
		trusted = s.NewestIssuedAt
	}
	if limit := trusted.Add(seenAhead); now.After(limit) {
		now = limit
	}
	// LastSeen never goes back.
	s.LastSeen = a.persisted.LastSeen
	if now.After(s.LastSeen) {
		s.LastSeen = now
	}
	return s
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
