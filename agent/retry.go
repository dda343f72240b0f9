package agent

import (
	"fmt"

	"github.com/otad/otad/ota"
)

// Which endings are final is docs/contract/installing.md's table. An ending
// is retryable when the slot was never marked and the same bytes may yet
// succeed: a download that failed, a payload given by hand that did not
// match (the next file may be the right one), a cancelled install. Every
// other ending is final: a verdict of the signed bytes, the health check or
// the bootloader, which the same offer would meet again.

// retryableCode says whether an install that failed with code may succeed
// with the same offer; given says its payload was a person's file.
func retryableCode(code ota.Code, given bool) bool {
	switch code {
	case ota.CodeDownloadFailed, ota.CodeCancelled:
		return true
	case ota.CodeSizeMismatch, ota.CodeHashMismatch, ota.CodeIndexMismatch, ota.CodeChunkMismatch:
		return given
	}
	return false
}

// reopens says whether offer t, which ended as e, starts again: only a
// retryable ending, and only by an explicit act — a person's otad install
// (local), or a message whose attempt counter is greater than any seen for
// the offer. A redelivery or a retained replay carries the same counter and
// reopens nothing.
func reopens(e Ended, t Target, local bool) bool {
	return e.Retryable && (local || t.Retry > e.Retry)
}

// failed ends the running install t with code. A download that failed is
// retried by the agent itself, at most Policy.RetryAttempts times, after a
// backoff the loop draws (RetryLater); nothing else is retried unasked.
func (m *machine) failed(t *Target, code ota.Code, msg string) {
	retryable := retryableCode(code, t.PayloadGiven)
	auto := code == ota.CodeDownloadFailed && !t.PayloadGiven && t.Try < m.p.RetryAttempts
	if auto {
		msg += fmt.Sprintf("; retry %d of %d after a backoff", t.Try+1, m.p.RetryAttempts)
	} else if retryable {
		msg += "; retryable: otad install of the same offer, or otactl publish --retry, starts it again"
	}
	m.s.Target = nil
	r := m.ending(t, ota.ResultFailed, code, msg, retryable)
	// Not the offer's end yet while the retry is armed: the fleet side waits
	// (docs/contract/rollouts.md, rule 3).
	r.Retrying, m.s.Ended[len(m.s.Ended)-1].Retrying = auto, auto
	m.transition(ota.Idle, r, "")
	if auto {
		next := *t
		next.Try++
		next.BytesDone, next.Transfer = 0, ota.Transfer{}
		m.do(RetryLater{Target: next})
	}
}

// retry starts t again when its timer ran out, if nothing happened since:
// the latest ending is still t's retryable one of the try before, and no
// install or pending offer took its place.
// The armed retry of the latest ending that does not start (or that the
// loop dropped) leaves the ending as it is, retryable, no longer retrying;
// any other late timer changes nothing.
func (m *machine) retry(ev EvRetry) {
	t := ev.Target
	if ev.Dropped || !m.retryStarts(t) {
		if e, ok := m.ended(&t); ok && e.Retrying && e.Try == t.Try-1 && m.stopRetrying() {
			m.emit(m.s.Phase, nil, "automatic retry of "+t.ID+" dropped")
		}
		return
	}
	m.s.Restarts = 0
	m.startInstall(t, fmt.Sprintf("retry %d of %d of %s", t.Try, m.p.RetryAttempts, t.ID))
}

// retryStarts says whether nothing took the place of t's armed retry.
func (m *machine) retryStarts(t Target) bool {
	n := len(m.s.Ended)
	if m.s.Phase != ota.Idle || m.s.Target != nil || m.s.Pending != nil || n == 0 {
		return false
	}
	e := m.s.Ended[n-1]
	return e.Key == t.Key() && e.Retryable && e.Try == t.Try-1 && e.Retry <= t.Retry && !t.IssuedAt.Before(m.s.NewestIssuedAt)
}

// stopRetrying clears retrying from last_result and the ended offers: no
// retry timer is armed any more (it started, was dropped, or the agent
// started anew: docs/contract/installing.md). It reports whether anything
// changed; the caller persists.
func (m *machine) stopRetrying() bool {
	changed := false
	if r := m.s.LastResult; r != nil && r.Retrying {
		r.Retrying, changed = false, true
	}
	for i := range m.s.Ended {
		if m.s.Ended[i].Retrying {
			m.s.Ended[i].Retrying, changed = false, true
		}
	}
	return changed
}
