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
// heard of yet would look absent. Once ready it stays ready.
type Observer struct {
	fleet  Fleet
	settle time.Duration
	now    func() time.Time
	// OnReady, if set, is called once, when the fleet is first ready (to
	// log how it was filled).
	OnReady func()

	mu         sync.Mutex
	begun      time.Time
	lastLen    int
	lastChange time.Time
	ready      bool
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
	if n := o.fleet.Len(); n != o.lastLen {
		o.lastLen, o.lastChange = n, now
	}
	became := !o.ready && now.Sub(o.begun) >= o.settle && now.Sub(o.lastChange) >= o.settle/3 && !now.Before(o.fleet.AnswersDue())
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
