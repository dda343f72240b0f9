package agent

import (
	"context"

	"github.com/otad/otad/ota"
)

type waiter struct {
	sha   string
	key   string // Target.Key: the offer waited for
	reply chan ota.Outcome
}

// Install hands an envelope to the loop and waits for its outcome: refused,
// up to date, failed, or the boot slot flipped. The log names its source "local".
func (a *Agent) Install(ctx context.Context, raw []byte) (ota.Outcome, error) {
	return a.InstallFrom(ctx, SourceLocal, raw)
}

// The sources of a waited-for install, as the log names them.
const (
	SourceLocal   = "local"   // otad install, in process
	SourceControl = "control" // otad install, through the daemon's control socket
	SourceBus     = "dbus"    // an Install method call on the system bus (device/busapi)
)

// InstallFrom is Install with the source the log names the offer by.
func (a *Agent) InstallFrom(ctx context.Context, source string, raw []byte) (ota.Outcome, error) {
	return a.install1(ctx, item{source: source, raw: raw})
}

// InstallGiven is InstallFrom for an offer whose payload a person gave
// (otad install --payload; the node's sources hold where): the scheme rule
// does not apply to it, and a payload that does not match ends it
// retryable (docs/contract/installing.md).
func (a *Agent) InstallGiven(ctx context.Context, source string, raw []byte) (ota.Outcome, error) {
	return a.install1(ctx, item{source: source, raw: raw, given: true})
}

func (a *Agent) install1(ctx context.Context, it item) (ota.Outcome, error) {
	reply := make(chan ota.Outcome, 1)
	it.reply = reply
	a.inbox.add(it)
	select {
	case o := <-reply:
		return o, nil
	case <-a.stopped:
		select {
		case o := <-reply: // answered on the way out
			return o, nil
		default:
			return ota.Outcome{}, ErrStopped
		}
	case <-ctx.Done():
		return ota.Outcome{}, ctx.Err()
	}
}

// settleWaiters answers the Install callers whose offer came to an end.
func (a *Agent) settleWaiters(events []ota.Event) {
	keep := a.waiters[:0]
	for _, w := range a.waiters {
		if o, ok := a.outcomeFor(w, events); ok {
			w.reply <- o
			continue
		}
		keep = append(keep, w)
	}
	a.waiters = keep
}

func (a *Agent) outcomeFor(w *waiter, events []ota.Event) (ota.Outcome, bool) {
	sha := w.sha
	for _, ev := range events {
		if ev.Result != "" && ev.SHA256 == sha {
			return ota.Outcome{Result: ev.Result, Code: ev.Code, Message: ev.Message, ID: ev.ID, SHA256: sha}, true
		}
	}
	s := a.state
	if t := s.Target; t != nil && t.SHA256() == sha {
		switch s.Phase {
		case ota.Staged, ota.Rebooting, ota.Confirming:
			return ota.Outcome{Result: ota.ResultStaged, ID: t.ID, SHA256: sha, Message: "slot " + string(t.Slot) + " is primary", Transfer: t.Transfer}, true
		}
		return ota.Outcome{}, false
	}
	if p := s.Pending; p != nil && p.SHA256() == sha {
		cur := s.Target
		return ota.Outcome{Result: ota.ResultPending, ID: p.ID, SHA256: sha,
			Message: "accepted; installs once " + cur.ID + " is settled (" + string(ForOperator(ota.Status{State: s.Phase}, a.cfg.Policy).State) + ")"}, true
	}
	if e, ok := s.endedKey(w.key); ok {
		// It ended before this offer was handed over, and that ending stayed
		// (a final one: a local install reopens a retryable one): nothing
		// was tried. Say so, with the earlier ending (docs/contract/commands.md).
		return alreadyEnded(e, s.LastResult, sha), true
	}
	if r := s.LastResult; r != nil && r.SHA256 == sha {
		return ota.Outcome{Result: r.Result, Code: r.Code, Message: r.Message, ID: r.ID, SHA256: sha, Transfer: r.Transfer}, true
	}
	return ota.Outcome{Result: ota.ResultSuperseded, SHA256: sha, Message: "a newer offer took its place"}, true
}

// alreadyEnded is the answer for an offer that had ended before (e) and
// was not tried again: that ending's result, and its code and message when
// the last result is still that offer's.
func alreadyEnded(e Ended, last *ota.Outcome, sha string) ota.Outcome {
	o := ota.Outcome{ID: e.ID, SHA256: sha, Result: e.Result, Retryable: e.Retryable, Time: e.Time, AlreadyEnded: true}
	if r := last; r != nil && r.ManifestSHA256 != "" && r.ManifestSHA256 == e.Key {
		o.ManifestSHA256, o.Code, o.Message = r.ManifestSHA256, r.Code, r.Message
	}
	return o
}

func (a *Agent) finishWaiters(err error) {
	a.settleWaiters(nil)
	for _, w := range a.waiters {
		msg := "agent stopped before the install finished"
		if err != nil {
			msg += ": " + err.Error()
		}
		w.reply <- ota.Outcome{Result: ota.ResultFailed, Code: ota.CodeCancelled, Message: msg, SHA256: w.sha}
	}
	a.waiters = nil
}
