package agent

import (
	"time"

	"github.com/otad/otad/ota"
)

// maxEnded is how many ended offers the journal remembers (docs/contract/installing.md: at least 32).
const maxEnded = 64

// seqBatch is how many seqs one journal write reserves for refusals.
const seqBatch = 64

// Ended is an offer that came to an outcome.
type Ended struct {
	Key    string     `json:"key"` // Target.Key
	ID     string     `json:"id"`
	Result ota.Result `json:"result"`
	// Retryable says the slot was never marked and the same bytes may yet
	// succeed: an explicit act starts it again (docs/contract/installing.md).
	Retryable bool `json:"retryable,omitempty"`
	// Retrying says the agent retries this ending by itself (a RetryLater
	// timer is armed): it is not the offer's end yet. As last_result.retrying
	// (docs/contract/formats.md); true only while the timer may run.
	Retrying bool `json:"retrying,omitempty"`
	// Try is the automatic retry that ended (Target.Try).
	Try int `json:"try,omitempty"`
	// Retry is the greatest attempt counter seen for the offer (Target.Retry).
	Retry int64 `json:"retry,omitempty"`
	// Time is when it ended, by the wall clock (shown only); zero in a
	// journal written before it was kept.
	Time time.Time `json:"time,omitzero"`
}

// Key identifies the offer: the SHA-256 of its manifest bytes, or for
// offers journaled before it was kept, the image and issued_at.
func (t *Target) Key() string {
	if t.ManifestSHA256 != "" {
		return t.ManifestSHA256
	}
	return t.SHA256() + "@" + t.IssuedAt.UTC().Format(time.RFC3339Nano)
}

// recordEnd remembers that t came to result: it never starts again, unless
// the ending is retryable.
func (m *machine) recordEnd(t *Target, result ota.Result, retryable bool) {
	key := t.Key()
	m.stopRetrying() // a new ending drops any armed retry (retry.go)
	m.s.Ended = append(m.s.Ended, Ended{Key: key, ID: t.ID, Result: result, Retryable: retryable, Try: t.Try, Retry: t.Retry, Time: m.now})
	if over := len(m.s.Ended) - maxEnded; over > 0 {
		m.s.Ended = append(m.s.Ended[:0], m.s.Ended[over:]...)
	}
}

// ended returns how t ended, if it did: a redelivery changes nothing.
func (m *machine) ended(t *Target) (Ended, bool) { return m.s.ended(t) }

// ended returns how t ended, if it did.
func (s *State) ended(t *Target) (Ended, bool) { return s.endedKey(t.Key()) }

// endedKey returns how the offer of key (Target.Key) ended, if it did.
func (s *State) endedKey(key string) (Ended, bool) {
	for i := len(s.Ended) - 1; i >= 0; i-- {
		if s.Ended[i].Key == key {
			return s.Ended[i], true
		}
	}
	return Ended{}, false
}

// clockRefusesKnown: r is a refusal by the clock alone (expired, not yet
// valid) of an offer under way or ended, delivered again (a retained
// replay) to a clock that has jumped since, as on a board without an RTC
// once NTP answers on its new slot. Its checks passed when it was taken and
// the same bytes change nothing now: it is no refusal of the offer.
func (s *State) clockRefusesKnown(r ota.Outcome) bool {
	if r.ManifestSHA256 == "" || (r.Code != ota.CodeExpired && r.Code != ota.CodeNotYetValid) {
		return false
	}
	known := Target{ManifestSHA256: r.ManifestSHA256}
	if t := s.Target; t != nil && t.ManifestSHA256 == r.ManifestSHA256 {
		return true
	}
	_, ended := s.ended(&known)
	return ended
}

// notice announces what changed nothing (a refusal, a redelivery) without
// writing the journal for it: its seq comes from a block reserved by one
// journal write, so seqs still only grow across restarts.
func (m *machine) notice(r *ota.Outcome, msg string) {
	m.s.Seq++
	if m.s.Seq >= m.s.SeqMark {
		m.s.SeqMark = m.s.Seq + seqBatch
		m.persist()
	}
	ev := ota.Event{Seq: m.s.Seq, From: m.s.Phase, To: m.s.Phase, Message: msg}
	if r != nil {
		ev.ID, ev.SHA256, ev.ManifestSHA256, ev.Result, ev.Code, ev.Message = r.ID, r.SHA256, r.ManifestSHA256, r.Result, r.Code, r.Message
	}
	m.do(Emit{Event: ev, State: m.s.Clone()})
}

// refused records a refusal in last_refusal and the events; last_result, the
// outcome of the last accepted offer, stays. A refused pending offer (its
// re-check failed) leaves the pending place, and that is journaled.
func (m *machine) refused(ev EvRefused) {
	r := ev.Outcome
	if !ev.Pending && m.s.clockRefusesKnown(r) {
		return
	}
	r.Result = ota.ResultRejected
	m.s.LastRefusal = &ota.Refusal{ID: r.ID, SHA256: r.SHA256, ManifestSHA256: r.ManifestSHA256, Code: r.Code, Message: r.Message, Time: ev.Time}
	if ev.Pending && m.s.Pending != nil {
		m.s.Pending = nil
		m.persist()
	}
	m.notice(&r, "")
}
