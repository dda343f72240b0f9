package controller

import (
	"context"
	"errors"
	"fmt"
	"github.com/otad/otad/rollout"
	"log/slog"
	"time"

	"github.com/otad/otad/mqtt"
)

// ErrNoState: nothing is retained on the rollout's state topic.
var ErrNoState = errors.New("no rollout")

// ReadState reads rollout name's retained state from each broker of cfg,
// one short-lived connection each with a random client ID (so a running
// controller is not disturbed), and returns the newest copy (State.Newer):
// a broker that keeps retained messages per node (RabbitMQ) may hold an
// older one on some node. A state that cannot be read (over the limit, not
// JSON) is an error naming it, never "no rollout"; an unreachable broker is
// skipped while another answers. A state trust does not verify is taken for
// absent, and said: with no other copy, the error is ErrNoState naming it.
func ReadState(ctx context.Context, cfg mqtt.Config, trust rollout.Trust, name string) ([]byte, rollout.State, error) {
	return readState(ctx, cfg, trust, name, true)
}

// readState is ReadState; a forged copy is reported only when report is
// set (see checkLease).
func readState(ctx context.Context, cfg mqtt.Config, trust rollout.Trust, name string, report bool) ([]byte, rollout.State, error) {
	var (
		raw     []byte
		best    rollout.State
		found   bool
		reached int
		lastErr error
		forged  error
		log     = logOf(cfg)
		topic   = mqtt.Topics{Prefix: cfg.TopicPrefix}.RolloutState(name)
		brokers = cfg.BrokerList()
	)
	for _, b := range brokers {
		in := NewInbox(mqtt.Topics{Prefix: cfg.TopicPrefix}, name, trust, log)
		sess, err := mqtt.Open(ctx, cfg.Named(b), map[string]byte{topic: 1}, in.Receive)
		if err == nil {
			err = sess.Sync(ctx)
			sess.Close()
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, rollout.State{}, ctx.Err()
			}
			log.Warn("rollout: broker not read", "broker", b, "err", err)
			lastErr = err
			continue
		}
		reached++
		b, rerr := in.Retained()
		if errors.Is(rerr, rollout.ErrForged) {
			if report {
				log.Warn("rollout: " + rerr.Error())
			}
			forged = rerr
			continue
		}
		if rerr != nil {
			return nil, rollout.State{}, rerr
		}
		if len(b) == 0 {
			continue
		}
		s, _, err := trust.OpenState(topic, b)
		if err != nil {
			return nil, rollout.State{}, fmt.Errorf("state of rollout %s on %s: %w", name, topic, err)
		}
		if !found || s.Newer(best) {
			raw, best, found = b, s, true
		}
	}
	switch {
	case reached == 0:
		return nil, rollout.State{}, lastErr
	case !found && forged != nil:
		return nil, rollout.State{}, fmt.Errorf("%w %q: %w", ErrNoState, name, forged)
	case !found:
		return nil, rollout.State{}, fmt.Errorf("%w %q: nothing retained on %s", ErrNoState, name, topic)
	}
	return raw, best, nil
}

// ReadRecords reads rollout name's per-device records from the broker of
// cfg (the first that answers): a wildcard subscription (QoS 0), until the
// broker has delivered what it retains. A broker that delivers no retained
// message to a wildcard (RabbitMQ) gives none: compare with the state's
// Records, and read those of the devices in question with ReadRecordsOf.
func ReadRecords(ctx context.Context, cfg mqtt.Config, trust rollout.Trust, name string) (map[string]rollout.Record, error) {
	in := NewInbox(mqtt.Topics{Prefix: cfg.TopicPrefix}, name, trust, logOf(cfg))
	sess, err := mqtt.Open(ctx, cfg, map[string]byte{in.records: 0}, in.Receive)
	if err != nil {
		return nil, err
	}
	defer sess.Close()
	if err := sess.Sync(ctx); err != nil {
		return nil, err
	}
	return in.Records(), nil
}

// ReadRecordsOf reads the records of the given devices by their exact
// topics (for a broker that gives no retained message to a wildcard), a
// few hundred topics a subscription.
func ReadRecordsOf(ctx context.Context, sess *mqtt.Session, in *Inbox, t mqtt.Topics, devices []string) (map[string]rollout.Record, error) {
	const batch = 500
	for start := 0; start < len(devices); start += batch {
		filters := map[string]byte{}
		for _, d := range devices[start:min(start+batch, len(devices))] {
			filters[t.RolloutDevice(in.name, d)] = 0
		}
		if err := sess.Subscribe(ctx, filters); err != nil {
			return nil, err
		}
		err := sess.Sync(ctx)
		topics := make([]string, 0, len(filters))
		for f := range filters {
			topics = append(topics, f)
		}
		_ = sess.Unsubscribe(context.WithoutCancel(ctx), topics...)
		if err != nil {
			return nil, err
		}
	}
	return in.Records(), nil
}

func logOf(cfg mqtt.Config) *slog.Logger {
	if cfg.Logger != nil {
		return cfg.Logger
	}
	return slog.New(slog.DiscardHandler)
}

// Replicas publishes through one session per broker node, for brokers that
// keep retained messages per node (RabbitMQ): the rollout's state and
// records are then on every node a reader may connect to. A publish
// succeeds when at least one node took it; the others catch up with the
// next state (a lease renewal publishes it every third of the TTL).
type Replicas struct {
	Sessions []*mqtt.Session
	Log      *slog.Logger
}

// replicaGrace is how long a publish waits for the other nodes once one
// has taken it: a node that is gone must not hold the controller up past
// its lease.
const replicaGrace = time.Second

// PublishRetained publishes through every session at once. It returns once
// one node has taken the message and the others have had replicaGrace,
// or all have failed.
func (r Replicas) PublishRetained(ctx context.Context, payload []byte, topics ...string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		i   int
		err error
	}
	results := make(chan result, len(r.Sessions))
	for i, s := range r.Sessions {
		go func() { results <- result{i, s.PublishRetained(ctx, payload, topics...)} }()
	}
	var (
		errs  []error
		ok    bool
		grace <-chan time.Time
	)
	for range r.Sessions {
		var res result
		select {
		case res = <-results:
		case <-grace:
			return nil
		}
		switch {
		case res.err == nil:
			if !ok {
				ok, grace = true, time.After(replicaGrace)
			}
		case errors.Is(res.err, rollout.ErrLeaseLost):
			return res.err
		default:
			errs = append(errs, res.err)
			if r.Log != nil {
				r.Log.Warn("rollout: a broker node did not take the state", "node", res.i, "err", res.err)
			}
		}
	}
	if ok {
		return nil
	}
	return errors.Join(errs...)
}
