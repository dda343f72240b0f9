package controller

import (
	"sync"
	"time"
)

// Fleet is the fleet as a controller follows it (a Tracker; a
// *fleetview.View is one too): the controller follows the fleet with a
// Tracker, far smaller per device than a whole fleet view.
type Fleet interface {
	Len() int              // devices heard of
	AnswersDue() time.Time // when the answers to the report request are due; zero when none was sent
}

// Observer says when a followed Fleet is ready to be judged. It is ready
// once the answers to the report request are due and the statuses have
// had settle to arrive and have stopped arriving for a third of it
// (docs/contract/rollouts.md, the fleet view): before that, a device not
// heard of yet would look absent. With a Probe, the quiet must also
// survive a round trip through the broker. Once ready it stays ready.
type Observer struct {
	fleet  Fleet
	settle time.Duration
	now    func() time.Time
	// OnReady, if set, is called once, when the fleet is first ready (to
	// log how it was filled).
	OnReady func()
	// Probe, if set, is a round trip through the broker that returns once
	// everything the broker sent before it has been counted (the session's
	// Sync). A broker busy with a million answers stops sending for
	// seconds at a time, and its silence looks like the end of them: the
	// fleet is ready only when a probe begun in a quiet spell comes back
	// with no device heard of meanwhile.
	Probe func() error

	mu         sync.Mutex
	begun      time.Time
	lastLen    int
	lastChange time.Time
	ready      bool
	probing    bool
	probed     *probeResult // the last probe's, until Ready reads it
}

// probeResult is how a probe ended: the devices heard of when it began, and
// its error.
type probeResult struct {
	len int
	err error
}

// NewObserver starts observing f now (now nil: the wall clock).
func NewObserver(f Fleet, settle time.Duration, now func() time.Time) *Observer {
	if now == nil {
		now = time.Now
	}
	t := now()
	return &Observer{fleet: f, settle: settle, now: now, begun: t, lastChange: t}
}

// Ready reports whether the fleet is ready to be judged now.
func (o *Observer) Ready() bool {
	o.mu.Lock()
	now := o.now()
	n := o.fleet.Len()
	if n != o.lastLen {
		o.lastLen, o.lastChange = n, now
	}
	quiet := now.Sub(o.begun) >= o.settle && now.Sub(o.lastChange) >= o.settle/3 && !now.Before(o.fleet.AnswersDue())
	became := false
	switch {
	case o.ready:
	case !quiet:
		o.probed = nil // its spell has ended
	case o.Probe == nil:
		became = true
	case o.probed != nil:
		// A failed probe, or devices heard of while it ran: the quiet
		// spell was the broker's, so a new one is waited for.
		became = o.probed.err == nil && o.probed.len == n
		o.probed = nil
	case !o.probing:
		o.probing = true
		go o.probe(n)
	}
	if became {
		o.ready = true
	}
	ready := o.ready
	o.mu.Unlock()
	if became && o.OnReady != nil {
		o.OnReady()
	}
	return ready
}

// probe runs Probe and keeps its result for Ready.
func (o *Observer) probe(n int) {
	err := o.Probe()
	o.mu.Lock()
	o.probing, o.probed = false, &probeResult{len: n, err: err}
	o.mu.Unlock()
}
