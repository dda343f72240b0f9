package demo

import (
	"fmt"
	"log/slog"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/auth"
	"github.com/mochi-mqtt/server/v2/listeners"
)

// Broker is an embedded MQTT broker on 127.0.0.1 that lets every client in:
// it only ever listens on the loopback interface, for one demo run.
type Broker struct {
	// URL is the broker's address for clients: mqtt://127.0.0.1:PORT.
	URL string
	srv *mochi.Server
}

// StartBroker starts the broker on a free loopback port; log receives its messages.
func StartBroker(log *slog.Logger) (*Broker, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	srv := mochi.New(&mochi.Options{Logger: log})
	if err := srv.AddHook(new(auth.AllowHook), nil); err != nil {
		return nil, fmt.Errorf("broker: auth hook: %w", err)
	}
	tcp := listeners.NewTCP(listeners.Config{ID: "demo", Address: "127.0.0.1:0"})
	if err := srv.AddListener(tcp); err != nil {
		return nil, fmt.Errorf("broker: listen on 127.0.0.1: %w", err)
	}
	if err := srv.Serve(); err != nil {
		srv.Close()
		return nil, fmt.Errorf("broker: %w", err)
	}
	// After AddListener the listener is bound: Address is the real port.
	return &Broker{URL: "mqtt://" + tcp.Address(), srv: srv}, nil
}

// Close disconnects every client and stops listening.
func (b *Broker) Close() error {
	if err := b.srv.Close(); err != nil {
		return fmt.Errorf("broker: close: %w", err)
	}
	return nil
}
