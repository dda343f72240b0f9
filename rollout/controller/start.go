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
	"sync"
	"time"

	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/rollout"
	"github.com/otad/otad/rollout/seen"
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
	// Counters keep the highest counters seen of the rollout's state and
	// commands across restarts (--state-dir); nil: a replay is refused
	// within this run only.
	Counters *seen.Store
	// TakeOver waits out a lease another live controller holds (at most
	// its TTL) instead of refusing it at once.
	TakeOver bool
	// BrokerQueue is the messages the broker queues for one client before
	// it drops (0: no limit): a plan drawing more answers at once to the
	// controller is refused before it offers anything (rollout.PacePreflight,
	// rollout.WavePreflight; docs/brokers.md, a large fleet).
	BrokerQueue int
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
// (rollout.ErrLeaseHeld, rollout.ErrLeaseLost); it does not start while
// another rollout of its group runs (rollout.ErrGroupBusy). It returns the
// last state.
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
	if err := rollout.PacePreflight(plan, cfg.BrokerQueue); err != nil {
		return rollout.State{}, nil, err
	}
	if err := CheckGroup(ctx, mcfg, cfg.Trust, plan, cfg.Out); err != nil {
		return rollout.State{}, nil, err
	}
	var (
		c       *controller
		d       *Driver
		s       rollout.State
		resumed bool
		lost    bool // a claim of this controller's was read back as lost
	)
	for try := 1; ; try++ {
		// Read first without disturbing a controller that runs: a live
		// lease held by another is refused before anything connects as
		// the rollout's controller.
		gone, err := checkLease(ctx, mcfg, cfg.Trust, cfg.Counters, plan.Name, holder, here, cfg.TakeOver, lost, cfg.Out)
		if err != nil {
			return rollout.State{}, nil, err
		}
		c, err = openController(ctx, mcfg, plan, cfg.Trust, cfg.Counters, cfg.Settle, log)
		if err == nil {
			d = &Driver{Plan: plan, Key: cfg.Key, Trust: cfg.Trust, Topics: c.topics, Pub: c.statePub(), Fleet: c.tracker.Fleet(c.observer),
				Holder: holder, TTL: cfg.Lease, Host: here.host, BootID: here.bootID, PID: here.pid, Gone: gone,
				Commands: c.inbox.Commands(), Seen: c.inbox.Seen(), Tick: cfg.Tick, OnState: cfg.OnState, Log: log}
			s, resumed, err = c.start(ctx, d, cfg)
		}
		if err == nil {
			break
		}
		if c != nil {
			c.close()
		}
		// Cut off while it starts (a broker restarting): read the lease
		// again. A claim read back as lost (two claimed at once) is read
		// again too, once both have stopped publishing: the broker kept
		// one claim, so its holder goes on and the other is refused — not
		// both stopping (docs/contract/rollouts.md, two started at once).
		var queueErr *rollout.BrokerQueueError
		if try == startTries || ctx.Err() != nil || errors.Is(err, ErrBadState) || errors.Is(err, rollout.ErrLeaseHeld) || errors.As(err, &queueErr) {
			return s, nil, err
		}
		pause := time.Duration(200+mrand.IntN(800)) * time.Millisecond
		if errors.Is(err, rollout.ErrLeaseLost) {
			lost = true
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
	started(cfg.Out, plan, s, resumed)
	c.empty.started(cfg.Out, rollout.EmptyGroup(plan, s))
	cfg.OnState(s)
	final, err := d.Run(ctx, s)
	if errors.Is(err, ErrHalted) {
		failed, n := c.tracker.Failures(maxHaltList)
		return final, &Halted{Failed: failed, N: n}, err
	}
	return final, nil, err
}

// started tells people how the controller started.
func started(out io.Writer, plan *rollout.Plan, s rollout.State, resumed bool) {
	if resumed {
		fmt.Fprintf(out, "continuing rollout %s from its retained state: %s, wave %d of %d\n", plan.Name, s.Phase, s.Wave, s.WaveCount)
	} else {
		fmt.Fprintf(out, "started rollout %s: offer %s to group %s in %d waves\n", plan.Name, plan.Offer.ID, plan.Group, len(plan.Waves))
	}
}

// emptyNote tells people, once, that the group is empty and what the
// rollout does meanwhile (rollout.EmptyGroup): after the line saying it
// started, whichever comes first of that and the fleet view being ready.
type emptyNote struct {
	mu                   sync.Mutex
	isReady, empty, done bool
	out                  io.Writer
	text                 string // set once started
}

func (n *emptyNote) ready(empty bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.isReady, n.empty = true, empty
	n.tell()
}

func (n *emptyNote) started(out io.Writer, text string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.out, n.text = out, text
	n.tell()
}

func (n *emptyNote) tell() {
	if n.isReady && n.empty && n.out != nil && n.text != "" && !n.done {
		n.done = true
		fmt.Fprintln(n.out, n.text)
	}
}

// startTries bounds the starts tried while another controller cuts this
// one off.
const startTries = 4

// claimSettle is the least wait, after a claim read back as lost while
// starting, before the lease is read again: long enough for the other
// claimer to read its own claim back and go on, or to stop as well.
const claimSettle = time.Second

// start takes the rollout on (docs/contract/rollouts.md, one controller
// per rollout): the newest retained state (or a new one), the lease
// claimed and read back, and only then the rollout's client ID taken
// (fence), so a controller refused — or losing a claim raced with another
// — never cuts the live one off; then the per-device records. A plan the
// broker's queue cannot take is refused before anything is published
// under the rollout's topics: its waves are sized from the group as seen,
// so the fleet is followed first; otherwise only once the lease is
// claimed, so that it is never read behind the devices' statuses.
func (c *controller) start(ctx context.Context, d *Driver, cfg Config) (rollout.State, bool, error) {
	early := cfg.BrokerQueue > 0 && d.Plan.Rate == nil
	if early {
		if err := c.follow(ctx, d.Plan.Group, cfg.Settle, cfg.Lease, cfg.BrokerQueue); err != nil {
			return rollout.State{}, false, err
		}
		if err := c.preflight(ctx, d.Plan, cfg.BrokerQueue); err != nil {
			return rollout.State{}, false, err
		}
	}
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
	if err := c.fence(ctx, d, *s.Lease); err != nil {
		return s, resumed, err
	}
	if d.Records, err = c.records(ctx, s); err != nil {
		return s, resumed, err
	}
	if !early {
		err = c.follow(ctx, d.Plan.Group, cfg.Settle, cfg.Lease, cfg.BrokerQueue)
	}
	return s, resumed, err
}

// controller is a rollout controller's connections: the primary session
// (statuses, the rollout's topics, report requests; the claim), failing
// over between the brokers; with several brokers, one session per broker
// node for the state and records (replicas); and, once the claim is
// confirmed, the session that publishes the offers (pub), with the state
// too when there is one broker. Until then each has a client ID of its own;
// pub and the replicas then have the rollout's (fence).
type controller struct {
	empty     emptyNote
	cfg       mqtt.Config
	name      string
	topics    mqtt.Topics
	tracker   *Tracker
	observer  *Observer
	inbox     *Inbox
	primary   *mqtt.Session
	replicas  []replica
	pub       *replica
	trust     rollout.Trust
	counters  *seen.Store
	key       string // the rollout's in counters
	reconnect mqtt.Backoff
	log       *slog.Logger
}

// replica is a session following the rollout's state alone: a broker
// node's (several brokers), or the offers' (pub).
type replica struct {
	sess  *mqtt.Session
	inbox *Inbox
}

func openController(ctx context.Context, cfg mqtt.Config, plan *rollout.Plan, trust rollout.Trust, counters *seen.Store, settle time.Duration, log *slog.Logger) (*controller, error) {
	c := &controller{cfg: cfg, name: plan.Name, topics: mqtt.Topics{Prefix: cfg.TopicPrefix}, trust: trust, log: log,
		counters: counters, key: CountersKey(cfg, plan.Name), reconnect: cfg.Reconnect}
	if c.reconnect.First == 0 {
		c.reconnect = mqtt.Backoff{First: 2 * time.Second, Max: 30 * time.Second}
	}
	c.tracker = NewTracker(plan, cfg.TopicPrefix, nil)
	c.tracker.Bad = func(topic string, err error) {
		log.Warn("rollout: status ignored: never in a wave", "topic", topic, "err", err)
	}
	c.observer = NewObserver(c.tracker, settle, nil)
	c.observer.OnReady = func() {
		n, in := c.tracker.Counts()
		log.Info("rollout: fleet view ready", "devices", n, "in_group", in, "group", plan.Group)
		c.empty.ready(in == 0)
	}
	// A quiet spell counts once a round trip through the broker confirms
	// it (Observer.Probe): everything sent before the sync has been counted.
	c.observer.Probe = func() error {
		if c.primary == nil {
			return errors.New("not connected yet")
		}
		return c.primary.Sync(ctx)
	}
	c.inbox = NewInbox(c.topics, plan.Name, trust, log)
	c.inbox.Remember(counters, c.key)
	// The rollout's own topics only: the state is read and the lease
	// claimed before the devices' statuses are on their way (follow),
	// never behind a broker's 100,000 retained statuses (docs/brokers.md,
	// a large fleet). A client ID of its own (cfg.DeviceID is ""): the
	// rollout's is taken once the claim is confirmed (fence).
	inboxTopics := c.inbox.Topics()
	recordPrefix := c.topics.RolloutDevice(plan.Name, "")
	primary := cfg
	primary.DeviceID = ""
	primary.Reconnect = c.reconnect
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
	c.replicas = c.openReplicas(ctx, func(int) string { return "" })
	if err := c.sync(ctx); err != nil {
		c.close()
		return nil, fmt.Errorf("reading the retained state of rollout %s: %w", plan.Name, err)
	}
	return c, nil
}

// openReplicas opens a session per broker node when there are several,
// node i with client ID id(i) ("": one of its own); a node not reached is
// skipped, saying so.
func (c *controller) openReplicas(ctx context.Context, id func(int) string) []replica {
	brokers := c.cfg.BrokerList()
	if len(brokers) < 2 {
		return nil
	}
	var rs []replica
	for i, b := range brokers {
		r, err := c.openState(ctx, c.cfg.Named(b), id(i))
		if err != nil {
			c.log.Warn("rollout: broker node not reached; its copy of the state is not written", "broker", b, "err", err)
			continue
		}
		rs = append(rs, r)
	}
	return rs
}

// openState opens a session following the rollout's state alone, as
// client ID id, gated by its own inbox (Inbox.Check).
func (c *controller) openState(ctx context.Context, cfg mqtt.Config, id string) (replica, error) {
	cfg.DeviceID, cfg.Reconnect = id, c.reconnect
	in := NewInbox(c.topics, c.name, c.trust, c.log)
	in.Remember(c.counters, c.key)
	in.Follower() // c.inbox hears the same messages, and reports them
	sess, err := mqtt.Open(ctx, cfg, map[string]byte{c.topics.RolloutState(c.name): 1}, in.Receive)
	if err != nil {
		return replica{}, err
	}
	sess.Gate(in.Check(sess))
	return replica{sess, in}, nil
}

// fence connects as the rollout's controller once its claim is confirmed
// (docs/contract/rollouts.md, one controller per rollout): the offers, and
// the state and records, go out from now on under the rollout's client ID
// (ClientID; "-r" and the node's index on each node of several), which
// cuts off a controller this one took the rollout over from — whatever it
// had queued to send goes nowhere. Each such session finds this claim
// there before it is used: a claim made after it means this one lost.
func (c *controller) fence(ctx context.Context, d *Driver, l rollout.Lease) error {
	id := ClientID(c.cfg.TopicPrefix, c.name)
	pub, err := c.openState(ctx, c.cfg, id)
	if err != nil {
		return err
	}
	c.pub = &pub
	for _, r := range c.replicas {
		r.sess.Close()
	}
	c.replicas = c.openReplicas(ctx, func(i int) string { return fmt.Sprintf("%s-r%d", id, i) })
	for _, r := range append([]replica{pub}, c.replicas...) {
		if _, err := r.inbox.Retained(); err != nil && !errors.Is(err, rollout.ErrForged) {
			return err
		}
		r.inbox.Hold(l)
		if err := r.inbox.Check(r.sess)(ctx); err != nil {
			return err
		}
	}
	// Another's claim seen after this one: this controller stops, and
	// these sessions, cut off by its, must not dial again meanwhile and
	// cut it off in turn.
	fenced := []*mqtt.Session{pub.sess}
	for _, r := range c.replicas {
		fenced = append(fenced, r.sess)
	}
	// They hear little: the statuses arriving on the primary say the
	// broker is busy, not gone, while an acknowledgement is late.
	for _, s := range fenced {
		s.Beside(c.primary)
	}
	c.inbox.OnLost(func() {
		go func() {
			for _, s := range fenced {
				s.Close()
			}
		}()
	})
	d.Pub, d.Offers = c.statePub(), pub.sess
	return nil
}

// follow subscribes to the devices' statuses (neither presence nor
// progress) and asks the group to report: brokers deliver few (Mosquitto,
// QoS 1) or no (RabbitMQ) retained statuses to a wildcard subscription.
// The lease is not renewed meanwhile: the SUBACK, which a broker sends
// once it has matched every retained status, is waited for half of it.
func (c *controller) follow(ctx context.Context, group string, settle, lease time.Duration, queue int) error {
	statuses := map[string]byte{mqtt.Topics{Prefix: c.topics.Prefix, Device: "+"}.Status(): 0}
	if err := c.primary.SubscribeWait(ctx, statuses, lease/2); err != nil {
		return fmt.Errorf("the devices' statuses: %w", err)
	}
	window := c.reportWindow(ctx, settle, queue)
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

// reportWindow is the window a report request gives the devices to answer
// in: settle, or longer for a fleet whose answers would come faster than
// the controller's one connection takes them: half the broker's queue for
// a client a second (queue messages), as a stock Mosquitto drops what is
// sent to a client with 1,000 messages waiting (max_queued_messages;
// docs/brokers.md, a large fleet), so 500 a second; with no queue limit
// (0), UnqueuedAnswersPerSecond, as a broker answering a million devices
// at once stalls for seconds. The fleet's size is the retained statuses
// seen, once they stop arriving (they follow the SUBACK; at most settle).
func (c *controller) reportWindow(ctx context.Context, settle time.Duration, queue int) time.Duration {
	perSecond := UnqueuedAnswersPerSecond
	if queue > 0 {
		perSecond = max(1, queue/2)
	}
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
	return AnswerWindow(settle, n, perSecond)
}

// UnqueuedAnswersPerSecond is the rate of answers a report request asks
// for from a fleet on a broker with no queue limit: a million devices'
// answers in 100 s.
const UnqueuedAnswersPerSecond = 10_000

// AnswerWindow is a report request's window for n devices answering at
// most perSecond a second: at least settle, at most mqtt.MaxReportWindow.
func AnswerWindow(settle time.Duration, n, perSecond int) time.Duration {
	return min(max(settle, time.Duration(n)*time.Second/time.Duration(perSecond)), mqtt.MaxReportWindow)
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
		raw      []byte
		best     *rollout.State
		forged   error
		reported = map[string]bool{}
	)
	for _, in := range inboxes {
		b, err := in.Retained()
		if errors.Is(err, rollout.ErrForged) {
			// The primary's node is read twice (its session and its
			// replica's), and a broker replicating what it retains holds
			// the same copy on every node: one forged message, reported
			// once.
			if !reported[string(b)] {
				reported[string(b)] = true
				c.log.Warn("rollout: " + err.Error())
			}
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
	return raw, c.remember(best)
}

// CountersKey is the rollout's key in the counters (seen.Key): its
// brokers, topic prefix and name.
func CountersKey(cfg mqtt.Config, name string) string {
	prefix := cfg.TopicPrefix
	if prefix == "" {
		prefix = mqtt.DefaultTopicPrefix
	}
	return seen.Key(cfg.BrokerList(), prefix, name)
}

// remember checks the retained state (nil: none) against the counters an
// earlier controller here kept, and keeps its counter: an older state
// published while no controller ran is a replay, and a state gone from
// every broker is not started over (docs/contract/rollouts.md, a signed
// control plane).
func (c *controller) remember(best *rollout.State) error {
	topic := c.topics.RolloutState(c.inbox.name)
	if best == nil {
		if m := c.counters.Highest(c.key, seen.State); m > 0 {
			return refuse("nothing is retained on %s, but this rollout's state was seen at counter %d (%s): the broker lost it or someone cleared it; "+
				"not starting it over (a new name starts a new rollout)", topic, m, c.counters.Path())
		}
		return nil
	}
	if err := c.counters.Check(c.key, seen.State, topic, best.Counter()); err != nil {
		return refuse("%w; not going on from it (docs/contract/rollouts.md, a signed control plane)", err)
	}
	return c.counters.Raise(c.key, seen.State, best.Counter(), best.Terminal())
}

// statePub publishes the state and records: through every broker node
// when there are several, else through pub once fenced (the primary
// session before: the claim).
func (c *controller) statePub() Publisher {
	if len(c.replicas) == 0 {
		if c.pub != nil {
			return c.pub.sess
		}
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
	if c.pub != nil {
		c.pub.sess.Close()
	}
	c.primary.Close()
}

// preflight refuses, once the group has been seen and before the lease is
// claimed, a plan whose unpaced waves draw more answers at once than the
// broker queues for the controller (rollout.WavePreflight): nothing has
// been published under the rollout's topics, so the broker is left as it
// was and the plan may be mended under its name.
func (c *controller) preflight(ctx context.Context, plan *rollout.Plan, queue int) error {
	for !c.observer.Ready() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	_, in := c.tracker.Counts()
	return rollout.WavePreflight(plan, in, queue)
}
