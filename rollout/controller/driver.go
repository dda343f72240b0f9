package controller

import (
	"context"
	"crypto"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/otad/otad/rollout"
	"log/slog"
	"time"

	"github.com/otad/otad/mqtt"
)

// Publisher publishes retained with QoS 1 and returns once the broker has
// every message (mqtt.Session does; Replicas publishes through several).
type Publisher interface {
	PublishRetained(ctx context.Context, payload []byte, topics ...string) error
}

// The ways Driver.Run ends besides finishing.
var (
	ErrHalted  = errors.New("rollout halted")
	ErrAborted = errors.New("rollout aborted")
)

// ErrBadState marks a retained state Start refuses to go on from: another
// plan's, or one that cannot be read (errors.Is; the message is the cause's).
var ErrBadState = errors.New("rollout state refused")

type badState struct{ error }

func (e badState) Is(target error) bool { return target == ErrBadState }
func (e badState) Unwrap() error        { return e.error }

func refuse(format string, args ...any) error { return badState{fmt.Errorf(format, args...)} }

// Driver runs Step against the world: it feeds it the fleet as seen, the
// operator's commands, the states the broker delivers and a clock, and
// carries out its actions. A state is adopted only once it is published,
// so a controller that cannot publish, or is killed, leaves the retained
// state it will go on from; and it publishes nothing once its lease has
// ended by its own clock.
type Driver struct {
	Plan   *rollout.Plan
	Topics mqtt.Topics // the prefix; Device is ignored
	// Key signs the state and the per-device records (nil: unsigned,
	// --insecure-unsigned); Trust verifies the retained state Start goes
	// on from (docs/contract/rollouts.md, a signed control plane).
	Key   crypto.Signer
	Trust rollout.Trust
	// Pub publishes the state and the per-device records; Offers the
	// offers (nil: Pub).
	Pub, Offers Publisher
	// Fleet calls fn with the fleet as seen now; fn must not keep it.
	Fleet func(fn func(rollout.View))
	// Records are the per-device records read back at start; the driver
	// adds every record it writes.
	Records map[string]rollout.Record
	// Holder names this controller in the lease; TTL is the lease's
	// (default DefaultLease).
	Holder string
	TTL    time.Duration
	// Host, BootID and PID say where this controller runs (in the lease);
	// Gone is a live lease's holder proven gone (Claim).
	Host, BootID string
	PID          int
	Gone         string
	// Commands carries the operator's commands (the control topic); Seen
	// the rollout's state as delivered after a reconnect.
	Commands <-chan rollout.Command
	Seen     <-chan rollout.State
	// Changed, if set, asks for a step now (the fleet changed); otherwise
	// Tick paces the steps. Both are needed: timeouts and soaks end
	// without any message.
	Changed <-chan struct{}
	Tick    time.Duration // default 1s
	Now     func() time.Time
	// OnState is called with every state published (a live table).
	OnState func(rollout.State)
	Log     *slog.Logger

	// sent is the newest state handed to the broker, acknowledged or not:
	// a publish cut short by the controller's end may still have arrived.
	sent rollout.State
}

// Run drives the rollout from s until it finishes (nil), halts (ErrHalted),
// is aborted (ErrAborted), loses its lease (ErrLeaseLost) or ctx ends; it
// returns the last published state. A halt offers nothing more, but Run
// stays on until every device already offered has an outcome (or timed
// out), so the state records them all (docs/contract/rollouts.md); a
// resume meanwhile goes on. A halted rollout given to Run with none
// pending ends at once unless a pending command resumes it.
func (d *Driver) Run(ctx context.Context, s rollout.State) (last rollout.State, err error) {
	d.defaults()
	defer func() {
		if !errors.Is(err, rollout.ErrLeaseLost) {
			last = d.release(ctx, last)
		}
	}()
	tick := d.Tick
	if tick <= 0 {
		tick = time.Second
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	// Commands waiting when the controller starts (a retained resume) come first.
	for pending := true; pending; {
		select {
		case c := <-d.Commands:
			var err error
			if s, err = d.step(ctx, s, c); err != nil {
				return s, finished(err)
			}
		default:
			pending = false
		}
	}
	if err := endOf(s); err != nil && !recording(s) {
		return s, finished(err)
	}
	for {
		if s.Halted != nil && !recording(s) {
			return s, fmt.Errorf("%w: %s", ErrHalted, s.Halted.Reason)
		}
		var in rollout.Input
		select {
		case <-ctx.Done():
			return s, ctx.Err()
		case c := <-d.Commands:
			in = c
		case seen := <-d.Seen:
			in = rollout.Seen{State: seen}
		case <-d.Changed:
		case <-t.C:
		}
		var err error
		if in != nil {
			s, err = d.step(ctx, s, in)
		} else {
			s, err = d.observe(ctx, s)
		}
		if errors.Is(err, ErrHalted) && recording(s) {
			d.Log.Info("rollout halted: recording the outcomes of the devices already offered", "rollout", s.Name, "pending", s.Counts.Pending)
			continue
		}
		if err != nil {
			return s, finished(err)
		}
	}
}

// recording: halted with devices offered that have no outcome yet, which
// the controller stays on to record.
func recording(s rollout.State) bool { return s.Halted != nil && !s.Terminal() && s.Counts.Pending > 0 }

func (d *Driver) defaults() {
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.Offers == nil {
		d.Offers = d.Pub
	}
	if d.TTL <= 0 {
		d.TTL = rollout.DefaultLease
	}
	if d.Records == nil {
		d.Records = map[string]rollout.Record{}
	}
}

// Start is the state a controller starts from (docs/contract/rollouts.md):
// the rollout's retained state (raw, as its state topic delivered it; empty
// when there is none), refused when another plan made it or another live
// controller holds its lease, else a new state; either way it claims the
// lease and publishes the state at once. It reports whether it resumed a
// retained state.
func (d *Driver) Start(ctx context.Context, retained []byte) (s rollout.State, resumed bool, err error) {
	d.defaults()
	topic := d.Topics.RolloutState(d.Plan.Name)
	if len(retained) > 0 {
		// A state no trusted operator signed is never gone on from: not
		// its lease, its halt or its waves (nor a new state written over
		// it, which would start the rollout again).
		if s, _, err = d.Trust.OpenState(topic, retained); err != nil {
			return s, false, refuse("retained state of rollout %s on %s: %w", d.Plan.Name, topic, err)
		}
		if s.PlanHash != d.Plan.Hash {
			return s, false, refuse("rollout %s already exists with another plan (hash %.12s, this plan's %.12s): a changed plan needs a new name",
				d.Plan.Name, s.PlanHash, d.Plan.Hash)
		}
		// The same plan hash and a state Step cannot go on from: written by
		// something else than a controller.
		if err := s.Consistent(d.Plan); err != nil {
			return s, false, refuse("retained state of rollout %s on %s: %w", d.Plan.Name, topic, err)
		}
		resumed = true
	} else {
		s = rollout.NewState(d.Plan, d.Now())
	}
	next, acts := rollout.Step(s, d.Plan, rollout.Claim{Holder: d.Holder, TTL: d.TTL, Host: d.Host, BootID: d.BootID, PID: d.PID, Gone: d.Gone}, d.Now())
	for _, a := range acts {
		if r, ok := a.(rollout.Refused); ok {
			return s, resumed, fmt.Errorf("%w: rollout %s is held by %s; it expires at %s unless renewed",
				rollout.ErrLeaseHeld, d.Plan.Name, r.Lease.String(), r.Lease.Expires().UTC().Format(time.RFC3339))
		}
	}
	var base *rollout.State
	if len(retained) > 0 {
		base = &s
	}
	if err := d.publish(ctx, next, func() error { return d.unchanged(base) }); err != nil {
		return s, resumed, err
	}
	return next, resumed, nil
}

// holderOf names the holder of s's lease ("no controller" without one).
func holderOf(s rollout.State) string {
	if s.Lease == nil {
		return "no controller"
	}
	return s.Lease.Holder
}

// ErrChanged: the rollout's state changed while a controller read it to
// claim the lease; the claim did not go out, and the lease is read again.
var ErrChanged = errors.New("rollout state changed while claiming")

// unchanged is nil unless a state the broker delivered since base was read
// (Seen; base nil: none was retained) is newer than base: another
// controller's claim or state landed meanwhile (two started at once, the
// other first). A claim from the older read would reach the broker after
// it and stand there until the holder publishes again
// (docs/contract/rollouts.md, two started at once). Checked last before
// the claim goes out: the window left is the claim's way to the broker.
func (d *Driver) unchanged(base *rollout.State) error {
	select {
	case seen := <-d.Seen:
		// Another's claim from base has the next epoch, or base's own
		// under another holder; the retained state delivered again (a
		// reconnect), or an older copy (another broker node's), is
		// nothing new.
		if base != nil && !seen.Newer(*base) && !rollout.Rivals(seen, *base) {
			return nil
		}
		return fmt.Errorf("%w: rollout %s was published meanwhile by %s (epoch %d, seq %d); not claiming it from the state read before",
			ErrChanged, seen.Name, holderOf(seen), seen.Counter()>>32, seen.Seq)
	default:
		return nil
	}
}

// release gives the lease up as the controller stops, so the next one
// need not wait for it to expire; it tries for a few seconds, even after
// ctx ended (an interrupt).
func (d *Driver) release(ctx context.Context, s rollout.State) rollout.State {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	// A state whose publish was not confirmed may have reached the broker:
	// released from the state before it, the rollout would go back (a soak
	// retained as running, with the same counter). Its records went out
	// before it, so it is a state to go on from either way.
	if d.sent.Name == s.Name && d.sent.Counter() > s.Counter() {
		s = d.sent
	}
	next, err := d.step(ctx, s, rollout.Release{})
	if err != nil || next.Lease == nil || next.Lease.Released.IsZero() {
		d.Log.Warn("rollout: lease not released; the next controller waits for it to expire", "rollout", s.Name, "err", err)
	}
	return next
}

// finished maps the end of a finished rollout to nil.
func finished(err error) error {
	if errors.Is(err, errFinished) {
		return nil
	}
	return err
}

// endOf says how a state ends a run: nil while it goes on.
func endOf(s rollout.State) error {
	switch {
	case s.Aborted != nil:
		return fmt.Errorf("%w: %s", ErrAborted, s.Aborted.Reason)
	case s.Finished != nil:
		return errFinished
	case s.Halted != nil:
		return fmt.Errorf("%w: %s", ErrHalted, s.Halted.Reason)
	}
	return nil
}

// errFinished ends Run's loop; Run returns nil for it.
var errFinished = errors.New("finished")

// observe steps on the fleet as seen now, and again at once while a batch
// of offers went out and more wait (an unpaced wave goes out batch after
// batch, not a batch a tick). Step runs under the fleet's lock; the actions
// after it, so the fleet goes on taking messages while they publish.
func (d *Driver) observe(ctx context.Context, s rollout.State) (rollout.State, error) {
	for {
		s = d.fresh(ctx, s)
		var (
			next rollout.State
			acts []rollout.Action
		)
		d.Fleet(func(v rollout.View) {
			v.Records = d.Records
			next, acts = rollout.Step(s, d.Plan, rollout.Observe{View: v}, d.Now())
		})
		var more bool
		var err error
		s, more, err = d.carry(ctx, s, next, acts)
		if err != nil || !more {
			return s, err
		}
	}
}

// step runs one input that needs no view.
func (d *Driver) step(ctx context.Context, s rollout.State, in rollout.Input) (rollout.State, error) {
	next, acts := rollout.Step(s, d.Plan, in, d.Now())
	s, _, err := d.carry(ctx, s, next, acts)
	return s, err
}

// carry carries out a step's actions. It returns the state to go on from:
// next if it was published, else s (Step is pure: the same input decides
// the same again on the next try); more is set when offers went out.
func (d *Driver) carry(ctx context.Context, s, next rollout.State, acts []rollout.Action) (rollout.State, bool, error) {
	var end error
	more := false
	for _, a := range acts {
		switch a := a.(type) {
		case rollout.LeaseLost:
			d.Log.Error("rollout: lease lost; stopping without publishing", "rollout", s.Name, "reason", a.Reason)
			return s, false, fmt.Errorf("%w: %s", rollout.ErrLeaseLost, a.Reason)
		case rollout.PublishRecord:
			if err := d.publishRecord(ctx, next, a.Record); err != nil {
				d.Log.Error("rollout: record not published; trying again", "rollout", s.Name, "device", a.Record.Device, "err", err)
				return s, false, leaseOr(ctx, err)
			}
		case rollout.PublishState:
			if err := d.publishState(ctx, a.State); err != nil {
				d.Log.Error("rollout: state not published; trying again", "rollout", s.Name, "err", err)
				return s, false, leaseOr(ctx, err)
			}
		case rollout.Offer:
			next = d.fresh(ctx, next)
			if done, err := d.offerInTime(ctx, next, a); err != nil {
				d.Log.Error("rollout: offers not all published; trying again", "rollout", s.Name, "wave", a.Wave, "published", done, "of", len(a.Devices), "err", err)
				// What went out is confirmed: the next try goes on from there.
				if in := d.partly(a, done); in != nil && !errors.Is(err, rollout.ErrLeaseLost) {
					if n, serr := d.step(ctx, next, in); serr == nil {
						next = n
					}
				}
				return next, false, leaseOr(ctx, err)
			}
			var in rollout.Input = rollout.Offered{Wave: a.Wave, Through: a.Through}
			if a.CatchUp {
				in = rollout.CaughtUp{N: len(a.Devices)}
			}
			var err error
			if next, err = d.step(ctx, next, in); err != nil {
				return next, false, err
			}
			more = true
		case rollout.Halt:
			d.Log.Warn("rollout halted", "rollout", s.Name, "reason", a.Reason)
			end = fmt.Errorf("%w: %s", ErrHalted, a.Reason)
		case rollout.Abort:
			d.Log.Warn("rollout aborted", "rollout", s.Name, "reason", a.Reason)
			end = fmt.Errorf("%w: %s", ErrAborted, a.Reason)
		case rollout.Finish:
			d.Log.Info("rollout finished", "rollout", s.Name)
			end = errFinished
		}
	}
	return next, more && end == nil, end
}

// leaseOr is ErrLeaseLost or the end of ctx when err says so, else nil:
// a failed publish is tried again on the next step.
func leaseOr(ctx context.Context, err error) error {
	if errors.Is(err, rollout.ErrLeaseLost) {
		return err
	}
	return ctx.Err()
}

// fresh renews s's lease when it is due, by a step that needs no view
// (the state as seen), and returns the state to go on from. A step over a
// large fleet can take seconds on a loaded machine (18 s over a million
// devices at a load of 8 on 2 cores), and the renewal it makes is as old
// as its start: the lease ran out while the batch it chose went out. So
// a renewal due is made before such a step, and before a batch of offers,
// which then has its whole window (offerInTime).
func (d *Driver) fresh(ctx context.Context, s rollout.State) rollout.State {
	if !d.renewalDue(s) {
		return s
	}
	if next, err := d.step(ctx, s, rollout.Seen{State: s}); err == nil {
		return next
	}
	return s
}

// renewalDue: s's lease, held by this process, is a third of its TTL old.
func (d *Driver) renewalDue(s rollout.State) bool {
	l := s.Lease
	return l != nil && !s.RenewedHere().IsZero() && l.Released.IsZero() && d.Now().Sub(s.RenewedHere()) >= l.TTL()/3
}

// leaseLeft is nil while s's lease, held by this process, has not expired
// by its own clock: checked before every publish, so a controller frozen
// past its lease publishes nothing when it wakes.
func (d *Driver) leaseLeft(s rollout.State) error {
	l := s.Lease
	if l == nil || s.RenewedHere().IsZero() {
		return nil
	}
	if age := d.Now().Sub(s.RenewedHere()); age >= l.TTL() {
		return fmt.Errorf("%w: not renewed for %v, past its %v", rollout.ErrLeaseLost, age.Round(time.Millisecond), l.TTL())
	}
	return nil
}

func (d *Driver) publishState(ctx context.Context, s rollout.State) error {
	return d.publish(ctx, s, nil)
}

// publish publishes s once ready, if set, passes just before it is sent.
func (d *Driver) publish(ctx context.Context, s rollout.State, ready func() error) error {
	if err := d.leaseLeft(s); err != nil {
		return err
	}
	b, err := s.Encode()
	if err != nil {
		return err
	}
	topic := d.Topics.RolloutState(s.Name)
	if b, err = rollout.Seal(d.Key, topic, s.Counter(), b); err != nil {
		return err
	}
	if ready != nil {
		if err := ready(); err != nil {
			return err
		}
	}
	d.sent = s
	if err := d.Pub.PublishRetained(ctx, b, topic); err != nil {
		return err
	}
	if d.OnState != nil {
		d.OnState(s)
	}
	return nil
}

func (d *Driver) publishRecord(ctx context.Context, s rollout.State, r rollout.Record) error {
	if err := d.leaseLeft(s); err != nil {
		return err
	}
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode record: %w", err)
	}
	topic := d.Topics.RolloutDevice(s.Name, r.Device)
	if b, err = rollout.Seal(d.Key, topic, s.Counter(), b); err != nil {
		return err
	}
	if err := d.Pub.PublishRetained(ctx, b, topic); err != nil {
		return err
	}
	d.Records[r.Device] = r
	return nil
}
