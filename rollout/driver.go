package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/otad/otad/mqtt"
)

// Publisher publishes retained with QoS 1 and returns once the broker has
// every message (mqtt.Session does).
type Publisher interface {
	PublishRetained(ctx context.Context, payload []byte, topics ...string) error
}

// The ways Driver.Run ends besides finishing.
var (
	ErrHalted  = errors.New("rollout halted")
	ErrAborted = errors.New("rollout aborted")
)

// Driver runs Step against the world: it feeds it the fleet as seen, the
// operator's commands and a clock, and carries out its actions. A state is
// adopted only once it is published, so a controller that cannot publish,
// or is killed, leaves the retained state it will go on from.
type Driver struct {
	Plan   *Plan
	Topics mqtt.Topics // the prefix; Device is ignored
	Pub    Publisher
	// Fleet returns the fleet as seen now.
	Fleet func() View
	// Commands carries the operator's commands (the control topic).
	Commands <-chan Command
	// Changed, if set, asks for a step now (the fleet changed); otherwise
	// Tick paces the steps. Both are needed: timeouts and soaks end
	// without any message.
	Changed <-chan struct{}
	Tick    time.Duration // default 1s
	Now     func() time.Time
	// OnState is called with every state published (a live table).
	OnState func(State)
	Log     *slog.Logger
}

// Run drives the rollout from s until it finishes (nil), halts (ErrHalted),
// is aborted (ErrAborted) or ctx ends; it returns the last published state.
// A halted rollout given to Run ends at once unless a pending command
// resumes it.
func (d *Driver) Run(ctx context.Context, s State) (State, error) {
	d.defaults()
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
	if err := endOf(s); err != nil {
		return s, finished(err)
	}
	for {
		var in Input
		select {
		case <-ctx.Done():
			return s, ctx.Err()
		case c := <-d.Commands:
			in = c
		case <-d.Changed:
			in = Observe{View: d.Fleet()}
		case <-t.C:
			in = Observe{View: d.Fleet()}
		}
		var err error
		if s, err = d.step(ctx, s, in); err != nil {
			return s, finished(err)
		}
	}
}

func (d *Driver) defaults() {
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
}

// Start is the state a controller starts from (docs/contract/rollouts.md):
// the rollout's retained state (raw, as its state topic delivered it; empty
// when there is none), refused when another plan made it, else a new state,
// published at once so the plan's hash is on record. It reports whether it
// resumed a retained state.
func (d *Driver) Start(ctx context.Context, retained []byte) (s State, resumed bool, err error) {
	d.defaults()
	topic := d.Topics.RolloutState(d.Plan.Name)
	if len(retained) > 0 {
		if s, err = DecodeState(retained); err != nil {
			return s, false, fmt.Errorf("retained state of rollout %s on %s: %w", d.Plan.Name, topic, err)
		}
		if s.PlanHash != d.Plan.Hash {
			return s, false, fmt.Errorf("rollout %s already exists with another plan (hash %.12s, this plan's %.12s): a changed plan needs a new name",
				d.Plan.Name, s.PlanHash, d.Plan.Hash)
		}
		// The same plan hash and a state Step cannot go on from: written by
		// something else than a controller.
		if err := s.consistent(d.Plan); err != nil {
			return s, false, fmt.Errorf("retained state of rollout %s on %s: %w", d.Plan.Name, topic, err)
		}
		return s, true, nil
	}
	s = NewState(d.Plan, d.Now())
	b, err := json.Marshal(s)
	if err != nil {
		return s, false, fmt.Errorf("encode state: %w", err)
	}
	return s, false, d.Pub.PublishRetained(ctx, b, topic)
}

// finished maps the end of a finished rollout to nil.
func finished(err error) error {
	if errors.Is(err, errFinished) {
		return nil
	}
	return err
}

// endOf says how a state ends a run: nil while it goes on.
func endOf(s State) error {
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

// step runs one input and its actions. It returns the state to go on from:
// the new one if it was published, else the old one (Step is pure: the same
// input decides the same again on the next try).
func (d *Driver) step(ctx context.Context, s State, in Input) (State, error) {
	_, acts := Step(s, d.Plan, in, d.Now())
	var end error
	for _, a := range acts {
		switch a := a.(type) {
		case PublishState:
			if err := d.publishState(ctx, a.State); err != nil {
				d.Log.Error("rollout: state not published; trying again", "rollout", s.Name, "err", err)
				return s, ctx.Err()
			}
			s = a.State
		case Offer:
			if err := d.offer(ctx, a); err != nil {
				d.Log.Error("rollout: offers not all published; trying again", "rollout", s.Name, "wave", a.Wave, "err", err)
				return s, ctx.Err()
			}
			var err error
			if s, err = d.step(ctx, s, Offered{Wave: a.Wave}); err != nil {
				return s, err
			}
		case Halt:
			d.Log.Warn("rollout halted", "rollout", s.Name, "reason", a.Reason)
			end = fmt.Errorf("%w: %s", ErrHalted, a.Reason)
		case Abort:
			d.Log.Warn("rollout aborted", "rollout", s.Name, "reason", a.Reason)
			end = fmt.Errorf("%w: %s", ErrAborted, a.Reason)
		case Finish:
			d.Log.Info("rollout finished", "rollout", s.Name)
			end = errFinished
		}
	}
	return s, end
}

func (d *Driver) publishState(ctx context.Context, s State) error {
	b, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("encode state: %w", err)
	}
	if err := d.Pub.PublishRetained(ctx, b, d.Topics.RolloutState(s.Name)); err != nil {
		return err
	}
	if d.OnState != nil {
		d.OnState(s)
	}
	return nil
}

// offer publishes the plan's envelope retained on each device's desired topic.
func (d *Driver) offer(ctx context.Context, o Offer) error {
	topics := make([]string, len(o.Devices))
	for i, dev := range o.Devices {
		topics[i] = mqtt.Topics{Prefix: d.Topics.Prefix, Device: dev}.Desired()
	}
	d.Log.Info("rollout: offering", "wave", o.Wave, "devices", len(o.Devices))
	return d.Pub.PublishRetained(ctx, d.Plan.Offer.Envelope, topics...)
}
