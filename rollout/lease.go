package rollout

import (
	"errors"
	"fmt"
	"time"
)

// Lease says which controller drives a rollout (docs/contract/rollouts.md,
// one controller per rollout). The holder renews it every third of its TTL
// by publishing the state; a controller that finds it unrenewed past its
// TTL may take it over, with the next epoch. A holder that has not renewed
// within the TTL by its own clock (it was frozen, or could not publish)
// publishes nothing more and stops: by then another may hold the lease.
type Lease struct {
	Holder  string    `json:"holder"` // "user@host pid N", unique per process
	Epoch   uint64    `json:"epoch"`  // 1 for the first holder, one more for each taker
	Since   time.Time `json:"since"`
	Renewed time.Time `json:"renewed"`
	TTLMS   int64     `json:"ttl_ms"` // at most MaxLeaseTTL
	// Where the holder runs: a controller started again on the same host
	// and boot may prove the holder gone (its pid not running) and take
	// over at once, without waiting out the TTL.
	Host   string `json:"host,omitempty"`
	BootID string `json:"boot_id,omitempty"`
	PID    int    `json:"pid,omitempty"`
	// Released: the holder stopped (the rollout ended, or it was
	// interrupted); the next controller need not wait for the TTL.
	Released time.Time `json:"released,omitzero"`
}

// DefaultLease is how long a lease lasts unrenewed.
const DefaultLease = 30 * time.Second

// TTL is how long the lease lasts unrenewed.
func (l *Lease) TTL() time.Duration { return time.Duration(l.TTLMS) * time.Millisecond }

// Expires is when the lease ends unless renewed.
func (l *Lease) Expires() time.Time { return l.Renewed.Add(l.TTL()) }

// Live reports whether the lease was renewed less than its TTL before now
// (by the reader's clock).
func (l *Lease) Live(now time.Time) bool {
	return l != nil && l.Released.IsZero() && now.Before(l.Expires())
}

func (l *Lease) epoch() uint64 {
	if l == nil {
		return 0
	}
	return l.Epoch
}

// String names the holder and since when, for the message of a refusal.
func (l *Lease) String() string {
	return fmt.Sprintf("%s (epoch %d) since %s, renewed %s", l.Holder, l.Epoch,
		l.Since.UTC().Format(time.RFC3339), l.Renewed.UTC().Format(time.RFC3339))
}

// Lost reports whether seen, a copy of the state from the broker, shows
// that another controller took the lease held as mine.
func Lost(mine *Lease, seen State) bool {
	if mine == nil || seen.Lease == nil {
		return false
	}
	return seen.Lease.Epoch > mine.Epoch || (seen.Lease.Epoch == mine.Epoch && seen.Lease.Holder != mine.Holder)
}

// Rivals reports whether a and b hold the lease of one epoch under two
// holders: two controllers claimed from the same state (two started at
// once, docs/contract/rollouts.md).
func Rivals(a, b State) bool {
	return a.Lease != nil && b.Lease != nil && a.Lease.Epoch == b.Lease.Epoch && a.Lease.Holder != b.Lease.Holder
}

// StaleClaim reports whether s, delivered after latest, is a rival's
// state older than latest: a claim made from a state read before latest's
// holder claimed, which reached the broker after that holder's next state.
// Every reader passes it over; its claimer stops on reading latest back.
func StaleClaim(latest, s State) bool { return latest.Newer(s) && Rivals(latest, s) }

// The ways a controller is refused or stopped for the lease (exit 4).
var (
	// ErrLeaseHeld: another controller holds the rollout's lease.
	ErrLeaseHeld = errors.New("rollout held by another controller")
	// ErrLeaseLost: this controller's lease ended (it was not renewed in
	// time, or another controller took it).
	ErrLeaseLost = errors.New("rollout lease lost")
)

// Claim asks for the lease as Holder, for TTL, from the process Host,
// BootID, PID. Gone names a live lease's holder that the claimer proved
// gone (same host and boot, its process not running): that lease is taken
// at once.
type Claim struct {
	Holder string
	TTL    time.Duration
	Host   string
	BootID string
	PID    int
	Gone   string
}

// Seen is a copy of the rollout's state as the broker delivered it (after
// a reconnect): it tells whether another controller took the lease.
type Seen struct{ State State }

// Release gives the lease up: the controller stops.
type Release struct{}

func (Claim) isInput()   {}
func (Seen) isInput()    {}
func (Release) isInput() {}

// Refused says the lease is held by another live controller.
type Refused struct{ Lease Lease }

// LeaseLost says this controller must stop at once, publishing nothing.
type LeaseLost struct{ Reason string }

func (Refused) isAction()   {}
func (LeaseLost) isAction() {}

// claim takes the lease unless another holds it live.
func (m *machine) claim(c Claim) {
	s := &m.s
	if l := s.Lease; l.Live(m.now) && l.Holder != c.Holder && (c.Gone == "" || l.Holder != c.Gone) {
		m.acts = append(m.acts, Refused{Lease: *l})
		return
	}
	what := "holds the lease"
	switch l := s.Lease; {
	case l == nil:
	case !l.Released.IsZero():
		what = fmt.Sprintf("takes the lease %s released at %s", l.Holder, l.Released.UTC().Format(time.RFC3339))
	case l.Holder != c.Holder && l.Live(m.now):
		what = fmt.Sprintf("takes the lease over from %s (its process %d is not running on this host since boot %s)", l.Holder, l.PID, l.BootID)
	case l.Holder != c.Holder:
		what = fmt.Sprintf("takes the lease over from %s (expired %s)", l.Holder, l.Expires().UTC().Format(time.RFC3339))
	}
	s.Lease = &Lease{Holder: c.Holder, Epoch: s.Lease.epoch() + 1, Since: m.now, Renewed: m.now, TTLMS: c.TTL.Milliseconds(),
		Host: c.Host, BootID: c.BootID, PID: c.PID}
	s.run.renewed = m.clock
	m.note("controller %s %s (epoch %d)", c.Holder, what, s.Lease.Epoch)
}

func (m *machine) release() {
	if l := m.s.Lease; l != nil && !m.s.run.renewed.IsZero() && l.Released.IsZero() {
		l.Released = m.now
		m.changed = true
	}
}

// leaseLost reports (and acts on) this controller's lease having ended: it
// was not renewed within its TTL by this process's clock, or in must show
// another holder.
func (m *machine) leaseLost(in Input) bool {
	l := m.s.Lease
	if l == nil || m.s.run.renewed.IsZero() {
		return false // a state this process never claimed: no lease to keep
	}
	reason := ""
	if seen, ok := in.(Seen); ok && Lost(l, seen.State) {
		reason = fmt.Sprintf("controller %s took the lease (epoch %d)", seen.State.Lease.Holder, seen.State.Lease.Epoch)
	} else if age := m.clock.Sub(m.s.run.renewed); age >= l.TTL() {
		reason = fmt.Sprintf("not renewed for %v, past its %v: another controller may hold it now", age.Round(time.Millisecond), l.TTL())
	}
	if reason == "" {
		return false
	}
	m.acts = []Action{LeaseLost{Reason: reason}}
	return true
}

// renew renews the lease every third of its TTL.
func (m *machine) renew() {
	l := m.s.Lease
	if l == nil || m.s.run.renewed.IsZero() || m.clock.Sub(m.s.run.renewed) < l.TTL()/3 {
		return
	}
	l.Renewed = m.now
	m.s.run.renewed = m.clock
	m.changed = true
}
