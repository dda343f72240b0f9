package mqtt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/otad/otad/ota"
)

var (
	onlinePayload  = []byte(`{"online":true}`)
	offlinePayload = []byte(`{"online":false}`)
)

const (
	// progressInterval keeps progress at most 2 messages a second (docs/contract/mqtt.md is QoS 0, best effort).
	progressInterval = 500 * time.Millisecond
	// maxQueuedEvents bounds the events kept while the broker is away; the oldest go first.
	maxQueuedEvents = 1000
)

// Conn is a device's MQTT connection (docs/contract/mqtt.md): a persistent session that
// takes offers from the desired topics and publishes status, events, progress
// and presence.
type Conn struct {
	cfg     Config
	topics  Topics
	desired map[string]bool
	reports map[string]bool // the report request topics (docs/contract/mqtt.md)
	roots   map[string]bool // the root of trust topics, when Config.OnRoot is set
	client  paho.Client
	log     *slog.Logger
	onOffer func(topic string, payload []byte)
	lost    chan struct{} // the connection dropped: connectLoop connects again

	stop      context.CancelFunc
	ctx       context.Context
	wake      chan struct{}
	loopsDone sync.WaitGroup
	closeOnce sync.Once

	mu            sync.Mutex // guards the fields below
	connected     bool       // between OnConnect and ConnectionLost
	onlinePending bool
	status        []byte
	statusPending bool
	events        [][]byte
	progress      []byte
	progressAt    time.Time // when progress was last handed to paho
	answers       answerPolicy
	answerTimer   *time.Timer // the pending answer to a report request

	dropped drops // oversized messages paho still has to hand over, emptied
}

// Dial returns at once: it connects (and reconnects, forever, with backoff) in the
// background, so a device boots and installs with the broker down. onOffer is called from
// paho's goroutine for every message on the device's and its groups' desired topics (an
// empty payload means the retained offer was cleared); it must not block. A persistent
// session may deliver an offer twice (queued, then again as retained on resubscribe).
// The device also answers report requests on the fleet's and its groups' report topics
// by publishing its status again (ReportRequest).
// The error is only for a bad config.
func Dial(cfg Config, onOffer func(topic string, payload []byte)) (*Conn, error) {
	if onOffer == nil {
		return nil, fmt.Errorf("%w: nil offer handler", ErrConfig)
	}
	if err := checkTopicPart("device_id", cfg.DeviceID); err != nil {
		return nil, err
	}
	for i, g := range cfg.Groups {
		if err := checkTopicPart(fmt.Sprintf("mqtt.groups[%d]", i), g); err != nil {
			return nil, err
		}
	}
	opts, err := clientOptions(cfg, cfg.DeviceID)
	if err != nil {
		return nil, err
	}
	t := Topics{Prefix: cfg.prefix(), Device: cfg.DeviceID}
	d := &Conn{
		cfg:     cfg,
		topics:  t,
		desired: map[string]bool{t.Desired(): true},
		reports: map[string]bool{t.FleetReport(): true},
		roots:   map[string]bool{},
		log:     cfg.logger().With("broker", cfg.Describe(), "client_id", cfg.DeviceID),
		onOffer: onOffer,
		wake:    make(chan struct{}, 1),
		lost:    make(chan struct{}, 1),
	}
	for _, g := range cfg.Groups {
		d.desired[t.Group(g)] = true
		d.reports[t.GroupReport(g)] = true
	}
	if cfg.OnRoot != nil {
		d.roots[t.Root()] = true
		for _, g := range cfg.Groups {
			d.roots[t.GroupRoot(g)] = true
		}
	}
	// Persistent session so offers published while the device was away are queued for it;
	// subscriptions are still renewed on every connect in case the broker lost the session.
	opts.SetCleanSession(false).
		SetResumeSubs(false).
		// connectLoop connects and reconnects, with jitter (see Backoff).
		SetAutoReconnect(false).
		SetConnectRetry(false).
		// Ordered, so events queued in paho over a reconnect are resent in order.
		SetStore(copyingStore{paho.NewOrderedMemoryStore()}).
		SetBinaryWill(t.Online(), offlinePayload, 1, true).
		// Also the handler for queued messages the broker sends before we resubscribe.
		SetDefaultPublishHandler(d.handle).
		SetCustomOpenConnectionFn(openLimited(ota.MaxEnvelopeSize, d.oversized)).
		SetOnConnectHandler(d.onConnect).
		SetConnectionLostHandler(d.onConnectionLost)
	d.client = paho.NewClient(opts)
	d.ctx, d.stop = context.WithCancel(context.Background())
	d.loopsDone.Add(2)
	go d.connectLoop()
	go d.sendLoop()
	return d, nil
}

// Topics returns the device's topic names.
func (d *Conn) Topics() Topics { return d.topics }

// oversized runs on paho's reading goroutine when a message over ota.MaxEnvelopeSize
// was dropped unread: paho gets it with an empty payload, which handle must
// not take for a cleared offer.
func (d *Conn) oversized(topic string, _ byte, size int) {
	d.log.Warn("mqtt: oversized message dropped unread", "topic", topic, "bytes", size, "limit", ota.MaxEnvelopeSize)
	d.dropped.add(topic, size)
	if d.cfg.OnOversized != nil && d.desired[topic] {
		d.cfg.OnOversized(topic, size)
	}
}

// handle runs on paho's goroutine; it only passes desired-topic messages on.
func (d *Conn) handle(_ paho.Client, m paho.Message) {
	if d.dropped.take(m.Topic(), m.Payload()) > 0 {
		return
	}
	if d.reports[m.Topic()] {
		d.onReport(m)
		return
	}
	if d.roots[m.Topic()] {
		if len(m.Payload()) > 0 { // a cleared root takes nothing back
			d.cfg.OnRoot(m.Topic(), m.Payload())
		}
		return
	}
	if !d.desired[m.Topic()] {
		d.log.Warn("mqtt: message on an unexpected topic dropped", "topic", m.Topic())
		return
	}
	d.onOffer(m.Topic(), m.Payload())
}

// connectLoop connects at once, and again after every lost connection
// (redial). paho resends the QoS 1 messages in flight from its store on
// each new connection of the persistent session.
func (d *Conn) connectLoop() {
	defer d.loopsDone.Done()
	redial(d.ctx, d.client, d.cfg.Reconnect, d.cfg.attemptTimeout(), d.lost, d.log, false)
}

// onConnect runs (in its own goroutine) after every connect: renew the subscriptions
// and have the sender publish presence and the latest status again.
func (d *Conn) onConnect(c paho.Client) {
	d.log.Info("mqtt: connected")
	d.mu.Lock()
	d.connected = true
	d.onlinePending = true
	d.statusPending = d.status != nil
	d.mu.Unlock()
	d.kick()

	filters := make(map[string]byte, len(d.desired)+len(d.reports)+len(d.roots))
	for topic := range d.desired {
		filters[topic] = 1
	}
	for topic := range d.roots {
		filters[topic] = 1
	}
	// QoS 0: a device that is away has nothing to answer later (it
	// publishes its status when it connects), and no broker queues
	// requests for it.
	for topic := range d.reports {
		filters[topic] = 0
	}
	tok := c.SubscribeMultiple(filters, nil) // nil: messages go to the default handler
	if err := waitToken(d.ctx, tok, d.cfg.connectTimeout()); err != nil {
		d.subscribeFailed(c, err)
		return
	}
	for topic, code := range tok.(*paho.SubscribeToken).Result() {
		if code == 0x80 {
			d.log.Error("mqtt: broker refused subscription", "topic", topic)
		}
	}
}

// subscribeFailed logs a failed subscribe by what it costs. paho runs
// onConnect in its own goroutine, so it can subscribe after Close (an agent
// stopping right after it connected, as one rebooting) or after the
// connection dropped again: nothing is missed then, the next connect
// subscribes anew. Only a live connection without its subscriptions is an
// error: the device hears no offers until it reconnects.
func (d *Conn) subscribeFailed(c paho.Client, err error) {
	switch {
	case d.ctx.Err() != nil:
		d.log.Debug("mqtt: subscribe abandoned: closing", "err", err)
	case errors.Is(err, paho.ErrNotConnected) || !c.IsConnectionOpen():
		d.log.Info("mqtt: subscribe abandoned: connection gone, renewed on reconnect", "err", err)
	default:
		d.log.Error("mqtt: subscribe failed", "err", err)
	}
}

func (d *Conn) onConnectionLost(_ paho.Client, err error) {
	d.log.Warn("mqtt: connection lost", "err", err)
	d.mu.Lock()
	d.connected = false
	d.mu.Unlock()
	select {
	case d.lost <- struct{}{}:
	default:
	}
}

// Connected reports whether the connection to the broker is up now.
func (d *Conn) Connected() bool { return d.client.IsConnectionOpen() }

// Close flushes what is queued, publishes {"online":false} retained (a clean disconnect
// does not fire the Last Will), waits for it bounded by ctx and disconnects.
func (d *Conn) Close(ctx context.Context) error {
	var err error
	d.closeOnce.Do(func() { err = d.close(ctx) })
	return err
}

func (d *Conn) close(ctx context.Context) error {
	d.mu.Lock()
	d.stop()
	if d.answerTimer != nil {
		d.answerTimer.Stop()
	}
	d.mu.Unlock()
	done := make(chan struct{})
	go func() { d.loopsDone.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = fmt.Errorf("mqtt close: waiting for the sender: %w", ctx.Err())
	}
	if err == nil && d.client.IsConnectionOpen() {
		tok := d.client.Publish(d.topics.Online(), 1, true, offlinePayload)
		if werr := waitToken(ctx, tok, d.cfg.connectTimeout()); werr != nil {
			err = fmt.Errorf("mqtt close: publish offline to %s: %w", d.topics.Online(), werr)
		}
	}
	d.client.Disconnect(250)
	return err
}

// errTimeout is returned when a paho token does not complete in time.
var errTimeout = errors.New("timed out")
