package mqtt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// Session is an operator connection that stays open (a rollout controller,
// a live view): it publishes, and passes the messages of its subscriptions
// to one handler, one call at a time, in the order they arrive. It starts
// at a random broker of the config and fails over to the others, with the
// jittered backoff of Config.Reconnect, when its connection is lost.
//
// paho reads the acknowledgements of what a client publishes on the same
// goroutine that hands it the messages to deliver, one at a time: a handler
// working through thousands of retained statuses would hold up the PUBACK
// of a publish made meanwhile until they are all handled (the rollout
// controller's report request timed out so at 20,000 devices). So paho's
// handler only queues the message, and the session's own goroutine calls
// the handler; the queue is bounded by bytes, beyond which paho waits.
type Session struct {
	cfg     Config
	c       paho.Client
	log     *slog.Logger
	filters map[string]byte
	q       *queue
	dropped drops
	lost    chan struct{}
	ctx     context.Context
	stop    context.CancelFunc
	loops   sync.WaitGroup

	mu          sync.Mutex
	connects    int
	onReconnect func() // called after each reconnect (OnReconnect)
	check       func(context.Context) error
	gate        chan struct{} // closed: publishes may go out
	gateErr     error         // the check failed: no publish ever again
	stalledGen  int           // the connection last dropped as stalled (stall.go)

	beside atomic.Pointer[queue] // another session's arrivals count as this one's (Beside)
}

// Beside has the waits of this session (stall.go) last while messages keep
// arriving on o too: a session that publishes and hears little (a rollout
// controller's offers) shares its broker with o, and a broker busy sending
// o its messages acknowledges late (docs/brokers.md, a large fleet).
func (s *Session) Beside(o *Session) { s.beside.Store(o.q) }

// Open connects and subscribes to filters (topic filter → QoS), calling fn
// for each message until Close. It reconnects (to the next broker when
// there are several) and resubscribes by itself; only the first connect or
// subscription failing (or ctx ending before then) is an error. Messages
// over MaxFleetMessage reach fn unread, with Oversized set.
func Open(ctx context.Context, cfg Config, filters map[string]byte, fn func(Message)) (*Session, error) {
	opts, err := operatorOptions(cfg)
	if err != nil {
		return nil, err
	}
	s := &Session{cfg: cfg, log: cfg.logger().With("broker", cfg.Describe()), filters: filters, q: newQueue(fn),
		lost: make(chan struct{}, 1), gate: make(chan struct{})}
	close(s.gate)
	s.ctx, s.stop = context.WithCancel(context.Background())
	subscribed := make(chan error, 1)
	opts.SetDefaultPublishHandler(func(_ paho.Client, m paho.Message) {
		s.q.push(item{msg: Message{Topic: m.Topic(), Payload: m.Payload(), Retained: m.Retained(),
			Oversized: s.dropped.take(m.Topic(), m.Payload())}})
	}).
		SetCustomOpenConnectionFn(openLimited(MaxFleetMessage, func(topic string, _ byte, size int) {
			s.log.Warn("mqtt: oversized message dropped unread", "topic", topic, "bytes", size, "limit", MaxFleetMessage)
			s.dropped.add(topic, size)
		})).
		SetAutoReconnect(false).
		SetConnectRetry(false).
		SetOnConnectHandler(func(c paho.Client) { s.onConnect(c, subscribed) }).
		SetConnectionLostHandler(func(_ paho.Client, err error) {
			s.log.Warn("mqtt session: connection lost", "err", err)
			s.connectionLost()
		})
	s.c = paho.NewClient(opts)
	s.q.start()
	if err := connect(ctx, cfg, s.c); err != nil {
		s.q.close()
		return nil, err
	}
	select {
	case err = <-subscribed:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	s.loops.Go(func() { redial(s.ctx, s.c, cfg.Reconnect, cfg.attemptTimeout(), s.lost, s.log, true) })
	return s, nil
}

func (s *Session) onConnect(c paho.Client, subscribed chan<- error) {
	err := subscribe(s.ctx, c, s.filters, s.cfg.connectTimeout())
	s.mu.Lock()
	s.connects++
	first := s.connects == 1
	again, check := s.onReconnect, s.check
	s.mu.Unlock()
	if first {
		subscribed <- err
		return
	}
	if err != nil {
		s.log.Error("mqtt session: resubscribe failed", "err", err)
		return
	}
	s.log.Info("mqtt session: reconnected")
	if check != nil {
		cerr := check(s.ctx)
		// A check that could not tell is tried again while this connection lasts.
		for errors.Is(cerr, ErrRetry) && s.ctx.Err() == nil && c.IsConnectionOpen() {
			time.Sleep(time.Second)
			cerr = check(s.ctx)
		}
		if errors.Is(cerr, ErrRetry) {
			return // the connection went: the next one checks
		}
		s.mu.Lock()
		if cerr != nil {
			s.gateErr = cerr
		}
		// Opened either way: a publish already waiting wakes and reads
		// gateErr, rather than timing out on a gate that never opens.
		select {
		case <-s.gate:
		default:
			close(s.gate)
		}
		s.mu.Unlock()
		if cerr != nil {
			s.log.Error("mqtt session: publishing stopped after the reconnect", "err", cerr)
			return
		}
	}
	if again != nil {
		again()
	}
}

// OnReconnect has fn called after each reconnect, once the subscriptions are
// renewed (on paho's goroutine for it; fn may publish): what was published
// while the connection was down is lost to a clean session, so a fleet view
// asks the devices to report again.
func (s *Session) OnReconnect(fn func()) {
	s.mu.Lock()
	s.onReconnect = fn
	s.mu.Unlock()
}

// ErrRetry marks a gate check that could not tell (its Sync timed out):
// it is tried again while the connection lasts.
var ErrRetry = errors.New("gate check: try again")

// Gate has every publish after a reconnect wait until check, run once the
// subscriptions are renewed, passes; when it fails (but with ErrRetry),
// every publish fails with its error from then on. A rollout controller checks so that the
// lease is still its own before it publishes anything on a new connection.
func (s *Session) Gate(check func(context.Context) error) {
	s.mu.Lock()
	s.check = check
	s.mu.Unlock()
}

// connectionLost holds publishes back and has redial dial again.
func (s *Session) connectionLost() {
	s.closeGate()
	select {
	case s.lost <- struct{}{}:
	default:
	}
}

func (s *Session) closeGate() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.check == nil {
		return
	}
	select {
	case <-s.gate:
		s.gate = make(chan struct{})
	default:
	}
}

// ready waits until publishes may go out: at once without a gate.
func (s *Session) ready(ctx context.Context) error {
	s.mu.Lock()
	gate, err := s.gate, s.gateErr
	s.mu.Unlock()
	if err != nil {
		return err
	}
	select {
	case <-gate:
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(s.cfg.attemptTimeout()):
		return fmt.Errorf("no connection to %s: %w", s.cfg.Describe(), errTimeout)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gateErr
}

// Close disconnects; fn is not called after Close returns. It must not be
// called from fn.
func (s *Session) Close() {
	s.stop()
	s.c.Disconnect(250)
	s.loops.Wait()
	s.q.close()
}

// publishWindow bounds the QoS 1 publishes in flight at once: thousands of
// offers go out without a round trip each, and without flooding the broker
// (measured on one loopback Mosquitto: 128 in flight publish 10,000 offers
// about twice as slowly as 1,024).
const publishWindow = 512

// PublishRetained publishes payload retained with QoS 1 to every topic and
// waits for all the PUBACKs, bounded by ctx. An empty payload clears the
// topics' retained messages.
func (s *Session) PublishRetained(ctx context.Context, payload []byte, topics ...string) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	gen := s.generation()
	window := make([]paho.Token, 0, publishWindow)
	names := make([]string, 0, publishWindow)
	drain := func() error {
		for i, tok := range window {
			if err := s.waitAck(ctx, tok); err != nil {
				s.stalled(gen, names[i], err)
				return fmt.Errorf("publish to %s: %w", names[i], err)
			}
		}
		window, names = window[:0], names[:0]
		return nil
	}
	for _, t := range topics {
		window = append(window, s.c.Publish(t, 1, true, payload))
		names = append(names, t)
		if len(window) == publishWindow {
			if err := drain(); err != nil {
				return err
			}
		}
	}
	return drain()
}

// Publish publishes payload to topic with QoS 1, not retained, and waits for
// the PUBACK, bounded by ctx.
func (s *Session) Publish(ctx context.Context, topic string, payload []byte) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	gen := s.generation()
	if err := s.waitAck(ctx, s.c.Publish(topic, 1, false, payload)); err != nil {
		s.stalled(gen, topic, err)
		return fmt.Errorf("publish to %s: %w", topic, err)
	}
	return nil
}

// Send publishes payload to topic with QoS 0, not retained, and waits only
// until it is written to the connection: a report request (devices
// subscribe to them at QoS 0, docs/contract/mqtt.md). It waits for no
// acknowledgement, which the broker would send after every retained
// message it is delivering to this session meanwhile (20,000 statuses of a
// fleet view just subscribed).
func (s *Session) Send(ctx context.Context, topic string, payload []byte) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	if err := waitToken(ctx, s.c.Publish(topic, 0, false, payload), s.cfg.connectTimeout()); err != nil {
		return fmt.Errorf("publish to %s: %w", topic, err)
	}
	return nil
}

// Sync returns once every message the broker had for this session's
// subscriptions when Sync was called has been handed to fn — in particular
// the retained messages of an exact-topic subscription, so "no retained
// state" can be told from "not arrived yet". It subscribes to a topic of its
// own and waits for a message it publishes there: a broker delivers one
// session's messages in order, and the session hands them to fn in order.
func (s *Session) Sync(ctx context.Context) error {
	topic := s.cfg.prefix() + "/sync/" + randomClientID()
	arrived := make(chan struct{})
	var once sync.Once
	tok := s.c.Subscribe(topic, 1, func(paho.Client, paho.Message) {
		once.Do(func() { s.q.push(item{reached: arrived}) })
	})
	// What the broker has to deliver first (a million retained statuses
	// of a wildcard just subscribed) comes before its SUBACK, its PUBACK
	// and the sync message: each wait gives up only when nothing at all
	// has arrived for a connect timeout.
	if err := s.waitArriving(ctx, tok.Done(), tok.Error); err != nil {
		return fmt.Errorf("subscribe %s: %w", topic, err)
	}
	defer s.c.Unsubscribe(topic)
	tok = s.c.Publish(topic, 1, false, []byte("sync"))
	if err := s.waitArriving(ctx, tok.Done(), tok.Error); err != nil {
		return fmt.Errorf("publish to %s: %w", topic, err)
	}
	if err := s.waitArriving(ctx, arrived, nil); err != nil {
		return fmt.Errorf("sync on %s: %w", topic, err)
	}
	return nil
}

// Subscribe adds filters to the session's subscriptions (renewed on every
// reconnect), waiting for the broker's SUBACK.
func (s *Session) Subscribe(ctx context.Context, filters map[string]byte) error {
	return s.SubscribeWait(ctx, filters, s.cfg.connectTimeout())
}

// SubscribeWait is Subscribe waiting up to wait for the SUBACK: a broker
// matches a wildcard against every retained message before it acknowledges
// it (Mosquitto: 100,000 statuses), which on a loaded broker takes longer
// than a connect.
func (s *Session) SubscribeWait(ctx context.Context, filters map[string]byte, wait time.Duration) error {
	s.mu.Lock()
	all := make(map[string]byte, len(s.filters)+len(filters))
	for f, q := range s.filters {
		all[f] = q
	}
	for f, q := range filters {
		all[f] = q
	}
	s.filters = all
	s.mu.Unlock()
	return subscribe(ctx, s.c, filters, wait)
}

// Unsubscribe drops filters (added by Subscribe) from the session.
func (s *Session) Unsubscribe(ctx context.Context, filters ...string) error {
	s.mu.Lock()
	all := make(map[string]byte, len(s.filters))
	for f, q := range s.filters {
		all[f] = q
	}
	for _, f := range filters {
		delete(all, f)
	}
	s.filters = all
	s.mu.Unlock()
	if err := waitToken(ctx, s.c.Unsubscribe(filters...), s.cfg.connectTimeout()); err != nil {
		return fmt.Errorf("unsubscribe: %w", err)
	}
	return nil
}

func subscribe(ctx context.Context, c paho.Client, filters map[string]byte, wait time.Duration) error {
	if len(filters) == 0 {
		return nil // a session that only publishes
	}
	tok := c.SubscribeMultiple(filters, nil)
	if err := waitToken(ctx, tok, wait); err != nil {
		return fmt.Errorf("subscribe: %w", err)
	}
	for topic, code := range tok.(*paho.SubscribeToken).Result() {
		if code == 0x80 {
			return fmt.Errorf("subscribe %s: %w", topic, ErrRefused)
		}
	}
	return nil
}
