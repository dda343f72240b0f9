package mqtt

import (
	"math/rand/v2"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// onReport takes a report request (on paho's goroutine: it only schedules).
// A retained request is stale, whoever left it: answering it would make
// every device answer on every reconnect.
func (d *Conn) onReport(m paho.Message) {
	if m.Retained() {
		d.log.Debug("mqtt: retained report request ignored", "topic", m.Topic())
		return
	}
	r, err := ParseReportRequest(m.Payload())
	if err != nil {
		d.log.Debug("mqtt: report request ignored", "topic", m.Topic(), "err", err)
		return
	}
	now := time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ctx.Err() != nil {
		return // closed
	}
	at, verdict := d.answers.take(now, r.Window(), func(w time.Duration) time.Duration { return rand.N(w) })
	d.log.Debug("mqtt: report request", "id", r.ID, "topic", m.Topic(), "window", r.Window(), "answer", verdict, "at", at)
	if verdict != answerScheduled && verdict != answerMoved {
		return
	}
	if d.answerTimer != nil {
		d.answerTimer.Stop()
	}
	d.answerTimer = time.AfterFunc(at.Sub(now), d.answer)
}

// answer publishes the status and presence again (retained, as always),
// now: a broker that delivers no retained message to a fleet view's wildcard
// subscription gives it neither.
func (d *Conn) answer() {
	d.mu.Lock()
	d.answers.answered()
	d.onlinePending = true
	d.statusPending = d.statusPending || d.status != nil
	d.mu.Unlock()
	d.kick()
}

// answerPolicy decides when a device answers report requests. One answer
// is pending at a time: a request that arrives while one is pending is
// served by it (moved earlier if the new window ends sooner). Past that, at
// most answerBurst answers and then one per answerEvery (a token bucket):
// a flood of requests costs the broker a few statuses a minute per device,
// never one per request.
type answerPolicy struct {
	tokens float64
	at     time.Time // when tokens was counted; zero: never (a full bucket)
	due    time.Time // the pending answer; zero: none
}

const (
	answerBurst = 4
	answerEvery = 15 * time.Second
)

// Verdicts of answerPolicy.take, for the log and the tests.
const (
	answerScheduled = "scheduled"    // an answer at the returned time
	answerMoved     = "moved"        // the pending answer, moved to the returned time
	answerPending   = "pending"      // the pending answer serves this request too
	answerLimited   = "rate_limited" // ignored: too many answers lately
)

// take decides on a request that arrived at now, asking for an answer within
// window; delay draws a time within it.
func (p *answerPolicy) take(now time.Time, window time.Duration, delay func(time.Duration) time.Duration) (time.Time, string) {
	if !p.due.IsZero() {
		if !p.due.After(now.Add(window)) {
			return p.due, answerPending
		}
		p.due = now.Add(delay(window))
		return p.due, answerMoved
	}
	if p.at.IsZero() {
		p.tokens = answerBurst
	} else {
		p.tokens = min(answerBurst, p.tokens+float64(now.Sub(p.at))/float64(answerEvery))
	}
	p.at = now
	if p.tokens < 1 {
		return time.Time{}, answerLimited
	}
	p.tokens--
	p.due = now.Add(delay(window))
	return p.due, answerScheduled
}

// answered clears the pending answer once it has been sent.
func (p *answerPolicy) answered() { p.due = time.Time{} }
