package mqtt

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// ErrRefused is returned when the broker refuses a subscription (SUBACK 0x80), as an ACL does.
var ErrRefused = errors.New("refused by the broker")

// operatorOptions is a plain client: clean session, the device ID or a random client ID.
func operatorOptions(cfg Config) (*paho.ClientOptions, error) {
	id := cfg.DeviceID
	if id == "" {
		id = randomClientID()
	}
	opts, err := clientOptions(cfg, id)
	if err != nil {
		return nil, err
	}
	return opts.SetCleanSession(true), nil
}

// connect makes one connection attempt bounded by ctx and the connect timeout.
func connect(ctx context.Context, cfg Config, c paho.Client) error {
	if err := waitToken(ctx, c.Connect(), cfg.connectTimeout()+time.Second); err != nil {
		return fmt.Errorf("connect to %s: %w", cfg.Broker, err)
	}
	return nil
}

// PublishRetained publishes payload retained with QoS 1 and waits for the PUBACK,
// bounded by ctx. An empty payload clears the topic's retained message. cfg.DeviceID is
// the client ID if set (never a live device's: the broker would drop that device), else
// a random "otactl-<hex>".
func PublishRetained(ctx context.Context, cfg Config, topic string, payload []byte) error {
	opts, err := operatorOptions(cfg)
	if err != nil {
		return err
	}
	c := paho.NewClient(opts)
	if err := connect(ctx, cfg, c); err != nil {
		return err
	}
	defer c.Disconnect(250)
	if err := waitToken(ctx, c.Publish(topic, 1, true, payload), cfg.connectTimeout()); err != nil {
		return fmt.Errorf("publish to %s: %w", topic, err)
	}
	return nil
}

// Watch subscribes to <prefix>/devices/+/status, /progress and /online and calls fn for
// each message, one call at a time, until ctx ends (then it returns nil). It reconnects
// and resubscribes by itself; only the first connect or subscription failing is an error.
func Watch(ctx context.Context, cfg Config, fn func(topic string, payload []byte)) error {
	s, err := Open(ctx, cfg, DeviceFilters(cfg.prefix()), func(m Message) { fn(m.Topic, m.Payload) })
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	<-ctx.Done()
	s.Close()
	return nil
}

// DeviceFilters are the subscriptions of a fleet view: every device's status,
// presence and progress under prefix. All QoS 0: Mosquitto (2.0) queues at
// most max_queued_messages (1,000) retained messages for a QoS 1 wildcard
// subscription and silently drops the rest, while QoS 0 messages to a
// connected client are not queued, so all of a fleet's retained statuses
// arrive (measured: 20,000). A view loses nothing else by it: its session is
// clean, so nothing is redelivered across a reconnect at any QoS.
func DeviceFilters(prefix string) map[string]byte {
	if prefix == "" {
		prefix = DefaultTopicPrefix
	}
	return map[string]byte{
		prefix + "/devices/+/status":   0,
		prefix + "/devices/+/online":   0,
		prefix + "/devices/+/progress": 0,
	}
}

// Message is one message an operator session received.
type Message struct {
	Topic   string
	Payload []byte
	// Retained is set on a retained message delivered because of a new
	// subscription; a message published while subscribed arrives without
	// it (MQTT 3.1.1 §3.3.1.3), retained or not.
	Retained bool
}

// Session is an operator connection that stays open (a rollout controller,
// a live view): it publishes, and passes the messages of its subscriptions to
// one handler, one call at a time, in the order they arrive.
type Session struct {
	cfg Config
	c   paho.Client

	mu      sync.Mutex // fn is called one at a time even across reconnects
	stopped bool       // set by Close: no fn call after that
	// onReconnect is called after each reconnect (OnReconnect).
	onReconnect func()
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

// Open connects and subscribes to filters (topic filter → QoS), calling fn
// for each message until Close. It reconnects and resubscribes by itself;
// only the first connect or subscription failing (or ctx ending before
// then) is an error.
func Open(ctx context.Context, cfg Config, filters map[string]byte, fn func(Message)) (*Session, error) {
	opts, err := operatorOptions(cfg)
	if err != nil {
		return nil, err
	}
	s := &Session{cfg: cfg}
	opts.SetDefaultPublishHandler(func(_ paho.Client, m paho.Message) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.stopped {
			fn(Message{Topic: m.Topic(), Payload: m.Payload(), Retained: m.Retained()})
		}
	})
	subscribed := make(chan error, 1)
	var first sync.Once
	log := cfg.logger()
	opts.SetAutoReconnect(true).SetOnConnectHandler(func(c paho.Client) {
		err := subscribe(ctx, cfg, c, filters)
		reported := false
		first.Do(func() { subscribed <- err; reported = true })
		switch {
		case !reported && err != nil:
			log.Error("mqtt session: resubscribe failed", "err", err)
		case !reported:
			s.mu.Lock()
			again := s.onReconnect
			s.mu.Unlock()
			if again != nil {
				again()
			}
		}
	})
	s.c = paho.NewClient(opts)
	if err := connect(ctx, cfg, s.c); err != nil {
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
	return s, nil
}

// Close disconnects; fn is not called after Close returns.
func (s *Session) Close() {
	s.c.Disconnect(250)
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
}

// publishWindow bounds the QoS 1 publishes in flight at once: thousands of
// offers go out without a round trip each, and without flooding the broker.
const publishWindow = 128

// PublishRetained publishes payload retained with QoS 1 to every topic and
// waits for all the PUBACKs, bounded by ctx. An empty payload clears the
// topics' retained messages.
func (s *Session) PublishRetained(ctx context.Context, payload []byte, topics ...string) error {
	window := make([]paho.Token, 0, publishWindow)
	names := make([]string, 0, publishWindow)
	drain := func() error {
		for i, tok := range window {
			if err := waitToken(ctx, tok, s.cfg.connectTimeout()); err != nil {
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
	if err := waitToken(ctx, s.c.Publish(topic, 1, false, payload), s.cfg.connectTimeout()); err != nil {
		return fmt.Errorf("publish to %s: %w", topic, err)
	}
	return nil
}

// Sync returns once every message the broker had for this session's
// subscriptions when Sync was called has been handed to fn — in particular
// the retained messages of an exact-topic subscription, so "no retained
// state" can be told from "not arrived yet". It subscribes to a topic of its
// own and waits for a message it publishes there: a broker delivers one
// session's messages in order.
func (s *Session) Sync(ctx context.Context) error {
	topic := s.cfg.prefix() + "/sync/" + randomClientID()
	arrived := make(chan struct{})
	var once sync.Once
	tok := s.c.Subscribe(topic, 1, func(paho.Client, paho.Message) { once.Do(func() { close(arrived) }) })
	if err := waitToken(ctx, tok, s.cfg.connectTimeout()); err != nil {
		return fmt.Errorf("subscribe %s: %w", topic, err)
	}
	defer s.c.Unsubscribe(topic)
	if err := waitToken(ctx, s.c.Publish(topic, 1, false, []byte("sync")), s.cfg.connectTimeout()); err != nil {
		return fmt.Errorf("publish to %s: %w", topic, err)
	}
	select {
	case <-arrived:
		// paho calls handlers in arrival order, one at a time (its default),
		// so every fn call for an earlier message has returned.
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(s.cfg.connectTimeout()):
		return fmt.Errorf("sync on %s: %w", topic, errTimeout)
	}
}

func subscribe(ctx context.Context, cfg Config, c paho.Client, filters map[string]byte) error {
	if len(filters) == 0 {
		return nil // a session that only publishes
	}
	tok := c.SubscribeMultiple(filters, nil)
	if err := waitToken(ctx, tok, cfg.connectTimeout()); err != nil {
		return fmt.Errorf("subscribe: %w", err)
	}
	for topic, code := range tok.(*paho.SubscribeToken).Result() {
		if code == 0x80 {
			return fmt.Errorf("subscribe %s: %w", topic, ErrRefused)
		}
	}
	return nil
}
