package controller

import (
	"context"
	"errors"
	"fmt"
	"github.com/otad/otad/rollout"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/rollout/seen"
)

// commandQueue bounds the commands waiting for the driver: operators send a
// few; a flood is dropped with a warning rather than held.
const commandQueue = 64

// Inbox is what a controller hears on its rollout's own topics
// (docs/contract/rollouts.md): the retained state, which it starts from
// (Driver.Start) and which, after a reconnect, tells whether another
// controller took the lease; the per-device records; and the operator's
// commands on the control topic, decoded and queued for Driver.Commands.
// The caller subscribes to Topics on the session it follows the fleet with
// and hands their messages to Receive.
type Inbox struct {
	state, control, records string
	name                    string
	trust                   rollout.Trust
	log                     *slog.Logger
	cmds                    chan rollout.Command
	seen                    chan rollout.State

	mu      sync.Mutex
	started bool   // Retained was called: later states go to Seen
	raw     []byte // the latest state message
	rawErr  error  // it could not be read
	latest  *rollout.State
	recs    map[string]rollout.Record
	mine    *rollout.Lease // the lease this controller holds (Hold)
	onLost  func()         // a state shows another's lease over mine (OnLost)
	lastCmd time.Time      // the newest command's time: an older one is a replay
	// quiet: a forged or replayed state is refused without a word
	// (Follower).
	quiet bool

	// counters keep the highest counters seen across restarts (Remember);
	// nil: within this process only.
	counters *seen.Store
	key      string
}

// Remember keeps the highest state and command counters this inbox takes
// in counters, under key (seen.Key), and refuses older ones read from
// there: a replay is then refused after a restart too
// (docs/contract/rollouts.md, a signed control plane). The state retained
// when the inbox starts is the caller's to check (Retained).
func (in *Inbox) Remember(counters *seen.Store, key string) {
	in.mu.Lock()
	in.counters, in.key = counters, key
	in.mu.Unlock()
}

// Follower makes in a second listener on a state topic the controller's
// primary inbox follows too (openState: the session that publishes the
// state, a broker node's): the broker delivers each message to both, so a
// forged or replayed state is the primary's to report, once, and this
// inbox only refuses it.
func (in *Inbox) Follower() {
	in.mu.Lock()
	in.quiet = true
	in.mu.Unlock()
}

// refused reports a state refused (forged, replayed), unless in is a
// Follower; in.mu is held.
func (in *Inbox) refused(msg string) {
	if !in.quiet {
		in.log.Warn(msg)
	}
}

// NewInbox listens for rollout name under the topic prefix t.Prefix,
// taking only what trust verifies (docs/contract/rollouts.md, a signed
// control plane): anything else is reported and taken for absent.
func NewInbox(t mqtt.Topics, name string, trust rollout.Trust, log *slog.Logger) *Inbox {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Inbox{state: t.RolloutState(name), control: t.RolloutControl(name), records: t.RolloutDevices(name), name: name,
		trust: trust, log: log, cmds: make(chan rollout.Command, commandQueue), seen: make(chan rollout.State, 1), recs: map[string]rollout.Record{}}
}

// Topics are the subscriptions the inbox needs, with their QoS: the
// records' wildcard at QoS 0, which Mosquitto's queue limit for QoS 1
// wildcard subscriptions does not cut short.
func (in *Inbox) Topics() map[string]byte {
	return map[string]byte{in.state: 1, in.control: 1, in.records: 0}
}

// Receive takes one message of Topics; others are ignored. A control
// message that is no command, or a record that does not decode, is logged
// and dropped.
func (in *Inbox) Receive(m mqtt.Message) {
	switch {
	case m.Topic == in.state:
		in.stateMessage(m)
	case m.Topic == in.control:
		if m.Oversized > 0 {
			in.log.Warn("rollout: ignoring a control message over the limit", "topic", m.Topic, "bytes", m.Oversized)
			return
		}
		if len(m.Payload) == 0 {
			return // the retained command cleared
		}
		p, _, err := in.trust.Open("command", m.Topic, m.Payload)
		if err != nil {
			in.log.Warn("rollout: "+err.Error(), "topic", m.Topic)
			return
		}
		c, err := rollout.DecodeCommand(p)
		if err != nil {
			in.log.Warn("rollout: ignoring a control message", "topic", m.Topic, "err", err)
			return
		}
		if !in.newCommand(m.Topic, c) {
			return
		}
		select {
		case in.cmds <- c:
		default:
			in.log.Warn("rollout: command queue full; ignoring a command", "id", c.ID, "op", c.Op)
		}
	case strings.HasPrefix(m.Topic, strings.TrimSuffix(in.records, "+")):
		in.record(m)
	}
}

// newCommand reports whether c is no replay: not older than a command
// seen on topic by this process, nor by an earlier one (counters). It
// remembers c's time as the newest.
func (in *Inbox) newCommand(topic string, c rollout.Command) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	if c.Time.Before(in.lastCmd) {
		in.log.Warn("rollout: replayed command on "+topic+" refused: issued before one already seen", "id", c.ID, "op", c.Op)
		return false
	}
	n := uint64(c.Time.UnixMilli()) // the counter it is signed with
	if err := in.counters.Check(in.key, seen.Command, topic, n); err != nil {
		in.log.Warn("rollout: "+err.Error(), "id", c.ID, "op", c.Op)
		return false
	}
	in.lastCmd = c.Time
	if err := in.counters.Raise(in.key, seen.Command, n, false); err != nil {
		in.log.Error("rollout: the command's counter is not kept: a restart may take an older command", "err", err)
	}
	return true
}

func (in *Inbox) stateMessage(m mqtt.Message) {
	var (
		s   rollout.State
		err error
	)
	switch {
	case m.Oversized > 0:
		err = fmt.Errorf("state of rollout %s is %d bytes, over the limit of %d", in.name, m.Oversized, mqtt.MaxFleetMessage)
	case len(m.Payload) == 0:
	default:
		if s, _, err = in.trust.OpenState(in.state, m.Payload); err != nil && !errors.Is(err, rollout.ErrForged) {
			err = fmt.Errorf("state of rollout %s on %s: %w", in.name, in.state, err)
		}
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if !in.started {
		in.raw, in.rawErr, in.latest = m.Payload, err, nil
		if err == nil && len(m.Payload) > 0 {
			in.latest = &s
		}
		return
	}
	if errors.Is(err, rollout.ErrForged) {
		in.refused("rollout: " + err.Error())
		return
	}
	if err != nil {
		in.log.Error("rollout: unreadable state on the state topic", "err", err)
		return
	}
	if len(m.Payload) == 0 {
		return
	}
	if in.latest != nil && in.latest.Newer(s) {
		if rollout.Rivals(*in.latest, s) {
			in.refused(fmt.Sprintf("rollout: a claim of rollout %s by %s made from an older state is passed over: counter %d, older than %d here (docs/contract/rollouts.md, two started at once)",
				in.name, s.Lease.Holder, s.Counter(), in.latest.Counter()))
		} else {
			in.refused(fmt.Sprintf("rollout: replayed state on %s refused: counter %d, %v (%d)", in.state,
				s.Counter(), rollout.ErrReplayed, in.latest.Counter()))
		}
		return
	}
	if err := in.counters.Check(in.key, seen.State, in.state, s.Counter()); err != nil {
		in.refused("rollout: " + err.Error())
		return
	}
	// Kept once the broker delivers it (not when published): the state a
	// controller killed now goes on from is one the broker holds.
	if err := in.counters.Raise(in.key, seen.State, s.Counter(), s.Terminal()); err != nil {
		in.log.Error("rollout: the state's counter is not kept: a restart may take an older state", "err", err)
	}
	in.latest = &s
	if in.onLost != nil && rollout.Lost(in.mine, s) {
		in.onLost()
	}
	select { // keep only the newest for the driver
	case old := <-in.seen:
		if old.Newer(s) {
			s = old
		}
	default:
	}
	in.seen <- s
}

func (in *Inbox) record(m mqtt.Message) {
	id := m.Topic[strings.LastIndexByte(m.Topic, '/')+1:]
	if m.Oversized > 0 {
		in.log.Warn("rollout: ignoring a record over the limit", "topic", m.Topic, "bytes", m.Oversized)
		return
	}
	if len(m.Payload) == 0 {
		return
	}
	p, _, err := in.trust.Open("record", m.Topic, m.Payload)
	if err != nil {
		in.log.Warn("rollout: "+err.Error(), "topic", m.Topic)
		return
	}
	r, err := rollout.DecodeRecord(p, id)
	if err != nil {
		in.log.Warn("rollout: ignoring a record", "topic", m.Topic, "err", err)
		return
	}
	in.mu.Lock()
	in.recs[id] = r
	in.mu.Unlock()
}

// Retained is the state retained on the state topic, nil when there is
// none, or why it could not be read (over the limit: never taken for
// none); call it once the session has synced its subscriptions. After it,
// states delivered go to Seen.
func (in *Inbox) Retained() ([]byte, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.started = true
	return in.raw, in.rawErr
}

// Records are the per-device records received so far.
func (in *Inbox) Records() map[string]rollout.Record {
	in.mu.Lock()
	defer in.mu.Unlock()
	return maps.Clone(in.recs)
}

// Commands are the operator's commands, in the order they arrived.
func (in *Inbox) Commands() <-chan rollout.Command { return in.cmds }

// Seen carries the states delivered after Retained, the newest kept.
func (in *Inbox) Seen() <-chan rollout.State { return in.seen }

// Hold records the lease this controller holds, for Check.
func (in *Inbox) Hold(l rollout.Lease) {
	in.mu.Lock()
	in.mine = &l
	in.mu.Unlock()
}

// OnLost has fn called, under the inbox's lock (it must not block), for
// each state delivered after Retained that shows another controller's
// lease over the one held (Hold).
func (in *Inbox) OnLost(fn func()) {
	in.mu.Lock()
	in.onLost = fn
	in.mu.Unlock()
}

// Check is the gate of a controller's session after a reconnect
// (mqtt.Session.Gate): once sess has delivered what the broker retains, it
// fails when the state there shows another controller's lease, so that
// nothing goes out on the new connection.
func (in *Inbox) Check(sess interface{ Sync(context.Context) error }) func(context.Context) error {
	return func(ctx context.Context) error {
		if err := sess.Sync(ctx); err != nil {
			return fmt.Errorf("%w: %w", mqtt.ErrRetry, err)
		}
		in.mu.Lock()
		defer in.mu.Unlock()
		if in.latest != nil && rollout.Lost(in.mine, *in.latest) {
			return fmt.Errorf("%w: controller %s took rollout %s (epoch %d)", rollout.ErrLeaseLost, in.latest.Lease.Holder, in.name, in.latest.Lease.Epoch)
		}
		return nil
	}
}
