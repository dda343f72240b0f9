package controller

import (
	"context"
	"crypto"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"strings"
	"time"

	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/rollout"
)

// Config is what a controller runs with: otactl's flags for `rollout
// start`.
type Config struct {
	MQTT mqtt.Config
	Plan *rollout.Plan
	// Settle: ask the group's devices to report within this long, and
	// collect statuses at least this long before judging; Tick: how often
	// the fleet is looked at; Lease: the lease's TTL.
	Settle, Tick, Lease time.Duration
	// Key signs what the controller publishes under {prefix}/rollouts/;
	// Trust verifies what it reads there (docs/contract/rollouts.md, a
	// signed control plane).
	Key   crypto.Signer
	Trust rollout.Trust
	// TakeOver waits out a lease another live controller holds (at most
	// its TTL) instead of refusing it at once.
	TakeOver bool
	// OnState is called with every state published (a live table).
	OnState func(rollout.State)
	// Out takes the lines for people (stderr): how the controller started,
	// a lease waited out or taken over.
	Out io.Writer
	Log *slog.Logger
}

// Halted is what a halted rollout leaves for its report: the devices whose
// status says the offer failed (at most maxHaltList), and how many.
type Halted struct {
	Failed []Failure
	N      int
}

// maxHaltList is how many failed devices a halt names.
const maxHaltList = 50

// Run runs the controller in the foreground (docs/contract/rollouts.md):
// it goes on from the retained state when there is one, and ends when the
// rollout finishes (nil), halts (ErrHalted, with the failed devices) or is
// aborted (ErrAborted), or another controller holds or takes its lease
// (rollout.ErrLeaseHeld, rollout.ErrLeaseLost). It returns the last state.
func Run(ctx context.Context, cfg Config) (rollout.State, *Halted, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	if cfg.OnState == nil {
		cfg.OnState = func(rollout.State) {}
	}
	log, plan := cfg.Log, cfg.Plan
	mcfg := cfg.MQTT
	mcfg.Logger = log
	holder, here := holderName(), thisProcess()
	var (
		c       *controller
		d       *Driver
		s       rollout.State
		resumed bool
	)
	for try := 1; ; try++ {
		// Read first without disturbing a controller that runs: a live
		// lease held by another is refused before anything connects as
		// the rollout's controller.
		gone, err := checkLease(ctx, mcfg, cfg.Trust, plan.Name, holder, here, cfg.TakeOver, cfg.Out)
		if err != nil {
			return rollout.State{}, nil, err
		}
		c, err = openController(ctx, mcfg, plan, cfg.Trust, cfg.Settle, log)
		if err == nil {
			d = &Driver{Plan: plan, Key: cfg.Key, Trust: cfg.Trust, Topics: c.topics, Pub: c.statePub(), Offers: c.primary, Fleet: c.tracker.Fleet(c.observer),
				Holder: holder, TTL: cfg.Lease, Host: here.host, BootID: here.bootID, PID: here.pid, Gone: gone,
				Commands: c.inbox.Commands(), Seen: c.inbox.Seen(), Tick: cfg.Tick, OnState: cfg.OnState, Log: log}
			s, resumed, err = c.start(ctx, d)
		}
		if err == nil {
			err = c.follow(ctx, plan.Group, cfg.Settle, cfg.Lease)
		}
		if err == nil {
			break
		}
		if c != nil {
			c.close()
		}
		// Another controller connecting as the rollout's client ID cuts
		// this one off while it starts: read the lease again. A claim
		// read back as lost (two claimed at once) is read again too,
		// once both have stopped publishing: the broker kept one claim,
		// so its holder goes on and the other is refused — not both
		// stopping (docs/contract/rollouts.md, two started at once).
		if try == startTries || ctx.Err() != nil || errors.Is(err, ErrBadState) || errors.Is(err, rollout.ErrLeaseHeld) {
			return s, nil, err
		}
		pause := time.Duration(200+mrand.IntN(800)) * time.Millisecond
		if errors.Is(err, rollout.ErrLeaseLost) {
			pause = claimSettle + time.Duration(mrand.Int64N(int64(claimSettle)))
		}
		log.Warn("rollout: start interrupted; reading the lease again", "err", err, "after", pause.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			return rollout.State{}, nil, ctx.Err()
		case <-time.After(pause):
		}
	}
	defer c.close()
	if resumed {
		fmt.Fprintf(cfg.Out, "continuing rollout %s from its retained state: %s, wave %d of %d\n", plan.Name, s.Phase, s.Wave, s.WaveCount)
	} else {
		fmt.Fprintf(cfg.Out, "started rollout %s: offer %s to group %s in %d waves\n", plan.Name, plan.Offer.ID, plan.Group, len(plan.Waves))
	}
	cfg.OnState(s)
	final, err := d.Run(ctx, s)
	if errors.Is(err, ErrHalted) {
		failed, n := c.tracker.Failures(maxHaltList)
		return final, &Halted{Failed: failed, N: n}, err
	}
	return final, nil, err
}

// startTries bounds the starts tried while another controller cuts this
// one off.
const startTries = 4

// claimSettle is the least wait, after a claim read back as lost while
// starting, before the lease is read again: long enough for the other
// claimer to read its own claim back and go on, or to stop as well.
const claimSettle = time.Second

// start takes the rollout on: the newest retained state (or a new one),
// the lease claimed and confirmed, the per-device records read back.
func (c *controller) start(ctx context.Context, d *Driver) (rollout.State, bool, error) {
	retained, err := c.retained()
	if err != nil {
		return rollout.State{}, false, err
	}
	s, resumed, err := d.Start(ctx, retained)
	if err != nil {
		return s, resumed, err
	}
	c.hold(*s.Lease)
	// Two controllers may have claimed at once: the broker keeps one claim.
	if err := c.confirm(ctx); err != nil {
		return s, resumed, err
	}
	d.Records, err = c.records(ctx, s)
	return s, resumed, err
}

// controller is a rollout controller's connections: the primary session
// (statuses, the rollout's topics, offers, report requests), failing over
// between the brokers; and, with several brokers, one session per broker
// node for the state and records (replicas).
type controller struct {
	topics   mqtt.Topics
	tracker  *Tracker
	observer *Observer
	inbox    *Inbox
	primary  *mqtt.Session
	replicas []replica
	trust    rollout.Trust
	log      *slog.Logger
}

type replica struct {
	sess  *mqtt.Session
	inbox *Inbox
}

func openController(ctx context.Context, cfg mqtt.Config, plan *rollout.Plan, trust rollout.Trust, settle time.Duration, log *slog.Logger) (*controller, error) {
	c := &controller{topics: mqtt.Topics{Prefix: cfg.TopicPrefix}, trust: trust, log: log}
	c.tracker = NewTracker(plan, cfg.TopicPrefix, nil)
	c.observer = NewObserver(c.tracker, settle, nil)
	c.observer.OnReady = func() {
		n, in := c.tracker.Counts()
		log.Info("rollout: fleet view ready", "devices", n, "in_group", in, "group", plan.Group)
	}
	c.inbox = NewInbox(c.topics, plan.Name, trust, log)
	// The rollout's own topics only: the state is read and the lease
	// claimed before the devices' statuses are on their way (follow), never
	// behind a broker's 100,000 retained statuses — meanwhile a second
	// controller would find no lease and connect as this one's client ID
	// (docs/brokers.md, a large fleet).
	inboxTopics := c.inbox.Topics()
	recordPrefix := c.topics.RolloutDevice(plan.Name, "")
	primary := cfg
	primary.DeviceID = ClientID(cfg.TopicPrefix, plan.Name)
	if primary.Reconnect.First == 0 {
		primary.Reconnect = mqtt.Backoff{First: 2 * time.Second, Max: 30 * time.Second}
	}
	sess, err := mqtt.Open(ctx, primary, c.inbox.Topics(), func(m mqtt.Message) {
		if _, own := inboxTopics[m.Topic]; own || strings.HasPrefix(m.Topic, recordPrefix) {
			c.inbox.Receive(m)
			return
		}
		c.tracker.Message(m)
	})
	if err != nil {
		return nil, err
	}
	c.primary = sess
	sess.Gate(c.inbox.Check(sess))
	if brokers := cfg.BrokerList(); len(brokers) > 1 {
		for i, b := range brokers {
			one := cfg.Named(b)
			one.DeviceID = fmt.Sprintf("%s-r%d", primary.DeviceID, i)
			one.Reconnect = primary.Reconnect
			in := NewInbox(c.topics, plan.Name, trust, log)
			rs, err := mqtt.Open(ctx, one, map[string]byte{c.topics.RolloutState(plan.Name): 1}, in.Receive)
			if err != nil {
				log.Warn("rollout: broker node not reached; its copy of the state is not written", "broker", b, "err", err)
				continue
			}
			rs.Gate(in.Check(rs))
			c.replicas = append(c.replicas, replica{rs, in})
		}
	}
	if err := c.sync(ctx); err != nil {
		c.close()
		return nil, fmt.Errorf("reading the retained state of rollout %s: %w", plan.Name, err)
	}
	return c, nil
}

// follow subscribes to the devices' statuses (neither presence nor
// progress) and asks the group to report: brokers deliver few (Mosquitto,
// QoS 1) or no (RabbitMQ) retained statuses to a wildcard subscription.
// The lease is not renewed meanwhile: the SUBACK, which a broker sends
// once it has matched every retained status, is waited for half of it.
func (c *controller) follow(ctx context.Context, group string, settle, lease time.Duration) error {
	statuses := map[string]byte{mqtt.Topics{Prefix: c.topics.Prefix, Device: "+"}.Status(): 0}
	if err := c.primary.SubscribeWait(ctx, statuses, lease/2); err != nil {
		return fmt.Errorf("the devices' statuses: %w", err)
	}
	window := c.reportWindow(ctx, settle)
	ask := func() error {
		r := mqtt.NewReportRequest(window)
		c.tracker.Asked(time.Now(), r.Window())
		if err := c.primary.Send(ctx, c.topics.GroupReport(group), r.Encode()); err != nil {
			return fmt.Errorf("report request: %w", err)
		}
		return nil
	}
	c.primary.OnReconnect(func() {
		if err := ask(); err != nil {
			c.log.Warn("rollout: report request after a reconnect", "err", err)
		}
	})
	return ask()
}

// reportAnswersPerSecond is the pace a report request asks of a large
// fleet: the answers reach the controller's one connection, and a stock
// Mosquitto drops what is sent to a client with 1,000 messages waiting
// (max_queued_messages; docs/brokers.md, a large fleet).
const reportAnswersPerSecond = 500

// reportWindow is the window a report request gives the devices to answer
// in: settle, or longer for a fleet whose answers would come faster than
// reportAnswersPerSecond. The fleet's size is the retained statuses seen,
// once they stop arriving (they follow the SUBACK; at most settle).
func (c *controller) reportWindow(ctx context.Context, settle time.Duration) time.Duration {
	last := -1
	for deadline := time.Now().Add(settle); time.Now().Before(deadline); {
		n, _ := c.tracker.Counts()
		if n == last {
			break
		}
		last = n
		select {
		case <-ctx.Done():
			return settle
		case <-time.After(250 * time.Millisecond):
		}
	}
	n, _ := c.tracker.Counts()
	return min(max(settle, time.Duration(n)*time.Second/reportAnswersPerSecond), mqtt.MaxReportWindow)
}

func (c *controller) sync(ctx context.Context) error {
	if err := c.primary.Sync(ctx); err != nil {
		return err
	}
	for _, r := range c.replicas {
		if err := r.sess.Sync(ctx); err != nil {
			c.log.Warn("rollout: broker node did not sync", "err", err)
		}
	}
	return nil
}

// retained is the newest state retained on any of the brokers.
func (c *controller) retained() ([]byte, error) {
	inboxes := []*Inbox{c.inbox}
	for _, r := range c.replicas {
		inboxes = append(inboxes, r.inbox)
	}
	var (
		raw    []byte
		best   *rollout.State
		forged error
	)
	for _, in := range inboxes {
		b, err := in.Retained()
		if errors.Is(err, rollout.ErrForged) {
			c.log.Warn("rollout: " + err.Error())
			forged = err
			continue
		}
		if err != nil {
			return nil, err
		}
		if len(b) == 0 {
			continue
		}
		s, _, err := c.trust.OpenState(in.state, b)
		if err != nil {
			return nil, err
		}
		if best == nil || s.Newer(*best) {
			raw, best = b, &s
		}
	}
	if best == nil && forged != nil {
		// Never a new state over it: that would start the rollout again.
		return nil, refuse("%w; not starting over it (docs/contract/rollouts.md, a signed control plane)", forged)
	}
	return raw, nil
}

// statePub publishes the state and records: through every broker node
// when there are several, else through the primary session.
func (c *controller) statePub() Publisher {
	if len(c.replicas) == 0 {
		return c.primary
	}
	rs := Replicas{Log: c.log}
	for _, r := range c.replicas {
		rs.Sessions = append(rs.Sessions, r.sess)
	}
	return rs
}

func (c *controller) hold(l rollout.Lease) {
	c.inbox.Hold(l)
	for _, r := range c.replicas {
		r.inbox.Hold(l)
	}
}

// confirm reads the state back once the claim is out: another
// controller's claim after it means this one lost.
func (c *controller) confirm(ctx context.Context) error {
	if err := c.sync(ctx); err != nil {
		return err
	}
	if err := c.inbox.Check(c.primary)(ctx); err != nil {
		return err
	}
	for _, r := range c.replicas {
		if err := r.inbox.Check(r.sess)(ctx); err != nil && !errors.Is(err, mqtt.ErrRetry) {
			return err
		}
	}
	return nil
}

// records are the per-device records the state says were written: from
// the wildcard subscription, or, on a broker that delivers no retained
// message to a wildcard (RabbitMQ), by exact topics for the devices whose
// status leaves an outcome in doubt, once the fleet has been seen.
func (c *controller) records(ctx context.Context, s rollout.State) (map[string]rollout.Record, error) {
	recs := c.inbox.Records()
	if len(recs) >= s.Records {
		return recs, nil
	}
	c.log.Info("rollout: reading per-device records by their topics", "have", len(recs), "want", s.Records)
	for !c.observer.Ready() {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	var doubt []string
	c.tracker.Fleet(c.observer)(func(v rollout.View) {
		v.Devices.Each(func(id string, d rollout.Device) {
			if _, ok := recs[id]; !ok && d.Outcome != ota.ResultSuccess && d.Outcome != ota.ResultUpToDate && d.Outcome != ota.ResultSuperseded {
				doubt = append(doubt, id)
			}
		})
	})
	recs, err := ReadRecordsOf(ctx, c.primary, c.inbox, c.topics, doubt)
	if err != nil {
		return nil, err
	}
	if len(recs) < s.Records {
		c.log.Warn("rollout: fewer per-device records than the state counts", "have", len(recs), "want", s.Records)
	}
	return recs, nil
}

func (c *controller) close() {
	for _, r := range c.replicas {
		r.sess.Close()
	}
	c.primary.Close()
}
