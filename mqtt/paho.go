package mqtt

import (
	"context"
	"fmt"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/eclipse/paho.mqtt.golang/packets"
)

// waitToken waits for tok, at most timeout and not past ctx.
func waitToken(ctx context.Context, tok paho.Token, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-tok.Done():
		return tok.Error()
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return fmt.Errorf("after %v: %w", timeout, errTimeout)
	}
}

// copyingStore keeps its own copy of each outgoing PUBLISH. paho's resume() marks stored
// packets Dup and resends them; without a copy, a publish made right after a connect (in
// the window before resume() runs) is the very packet the network goroutine is writing,
// a data race. The resend itself is a QoS 1 duplicate, which MQTT allows.
type copyingStore struct{ paho.Store }

func (s copyingStore) Put(key string, m packets.ControlPacket) {
	if p, ok := m.(*packets.PublishPacket); ok {
		cp := *p
		m = &cp
	}
	s.Store.Put(key, m)
}
