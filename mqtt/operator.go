package mqtt

import (
	"context"
	"errors"
	"fmt"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/otad/otad/ota"
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
	if err := waitToken(ctx, c.Connect(), cfg.attemptTimeout()); err != nil {
		return fmt.Errorf("connect to %s: %w", cfg.Describe(), err)
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
// fn gets the whole message: an oversized one arrives with an empty payload and
// must not read as cleared (Message.TooLarge).
func Watch(ctx context.Context, cfg Config, fn func(Message)) error {
	s, err := Open(ctx, cfg, DeviceFilters(cfg.prefix()), fn)
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
	// Oversized is the size of a message over MaxFleetMessage, dropped
	// unread (Payload is empty): an error to report, never an empty
	// message (docs/contract/mqtt.md, limits).
	Oversized int
}

// TooLarge is the error of a message dropped unread for its size: what it
// is ("status of device gw-1"), its topic, its size and the limit, with the
// contract's code too_large (docs/contract/mqtt.md, limits: never handed on
// as an empty message); nil for a message read whole.
func (m Message) TooLarge(what string) error {
	if m.Oversized == 0 {
		return nil
	}
	return ota.Errorf(ota.CodeTooLarge, "%s on %s is %d bytes, over the limit of %d", what, m.Topic, m.Oversized, MaxFleetMessage)
}

// MaxFleetMessage bounds every message the fleet side (otactl, a rollout
// controller) reads: AWS IoT Core's message limit, 128 KiB.
const MaxFleetMessage = 128 << 10
