package rollout

import (
	"sync"
	"time"

	"github.com/otad/otad/ota"
)

// Fleet is the fleet as a controller follows it; *fleetview.View is one.
// It is an interface so that rollout need not import fleetview, which
// imports rollout for OutcomeOf.
type Fleet interface {
	Len() int              // devices heard of
	AnswersDue() time.Time // when the answers to the report request are due; zero when none was sent
	Each(fn func(id string, st ota.Status))
}

// Observer makes the Views Step judges from a followed Fleet. A view is
// Ready once the answers to the report request are due and the statuses
// have had settle to arrive and have stopped arriving for a third of it
// (docs/contract/rollouts.md, the fleet view): before that, a device not
// heard of yet would look absent. Once ready it stays ready.
type Observer struct {
	fleet  Fleet
	settle time.Duration
	now    func() time.Time
	// OnReady, if set, is called once, when the view is first ready (to
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

// View is the fleet as seen now (Driver.Fleet).
func (o *Observer) View() View {
	o.mu.Lock()
	now := o.now()
	if n := o.fleet.Len(); n != o.lastLen {
		o.lastLen, o.lastChange = n, now
	}
	became := !o.ready && now.Sub(o.begun) >= o.settle && now.Sub(o.lastChange) >= o.settle/3 && !now.Before(o.fleet.AnswersDue())
	if became {
		o.ready = true
	}
	v := View{Ready: o.ready, Devices: make(map[string]ota.Status, o.lastLen)}
	o.mu.Unlock()
	if became && o.OnReady != nil {
		o.OnReady()
	}
	o.fleet.Each(func(id string, st ota.Status) { v.Devices[id] = st })
	return v
}
