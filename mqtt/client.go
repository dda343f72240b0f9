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
	opts, err := operatorOptions(cfg)
	if err != nil {
		return err
	}
	p := cfg.prefix()
	filters := map[string]byte{
		p + "/devices/+/status":   1,
		p + "/devices/+/online":   1,
		p + "/devices/+/progress": 0,
	}
	var (
		mu      sync.Mutex // fn is called one at a time even across reconnects
		stopped bool       // set when Watch returns: no fn call after that
	)
	opts.SetDefaultPublishHandler(func(_ paho.Client, m paho.Message) {
		mu.Lock()
		defer mu.Unlock()
		if !stopped && ctx.Err() == nil {
			fn(m.Topic(), m.Payload())
		}
	})
	subscribed := make(chan error, 1)
	var first sync.Once
	log := cfg.logger()
	opts.SetAutoReconnect(true).SetOnConnectHandler(func(c paho.Client) {
		err := subscribe(ctx, cfg, c, filters)
		reported := false
		first.Do(func() { subscribed <- err; reported = true })
		if !reported && err != nil {
			log.Error("mqtt watch: resubscribe failed", "err", err)
		}
	})
	c := paho.NewClient(opts)
	if err := connect(ctx, cfg, c); err != nil {
		return err
	}
	defer func() {
		c.Disconnect(250)
		mu.Lock()
		stopped = true
		mu.Unlock()
	}()
	select {
	case err := <-subscribed:
		if err != nil {
			return err
		}
	case <-ctx.Done():
		return nil
	}
	<-ctx.Done()
	return nil
}

func subscribe(ctx context.Context, cfg Config, c paho.Client, filters map[string]byte) error {
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
