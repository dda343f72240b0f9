package mqtt

import (
	"context"
	"errors"
	"fmt"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// A connection can look up (keepalives answered) while the broker no
// longer acknowledges what is published on it: seen on a RabbitMQ cluster
// after a node was lost (TestRolloutOnCluster), a controller's offers went
// unacknowledged for minutes on the node it had failed over to. A QoS 1
// publish that times out on the live connection therefore drops it, and
// the session dials again (Config.Reconnect), as if it had been lost.

// generation names the connection publishes go out on now.
func (s *Session) generation() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.connects
}

// stalled drops connection gen when err is a publish timing out on it:
// not when ctx ended, and not when the session has reconnected since.
func (s *Session) stalled(gen int, topic string, err error) {
	if !errors.Is(err, errTimeout) || s.ctx.Err() != nil || !s.c.IsConnectionOpen() {
		return
	}
	s.mu.Lock()
	// Several publishes timing out together drop it once.
	current := s.connects == gen && s.stalledGen != gen
	s.stalledGen = gen
	s.mu.Unlock()
	if !current {
		return
	}
	s.log.Warn("mqtt session: a publish was not acknowledged; dropping the connection to dial again", "topic", topic, "timeout", s.cfg.connectTimeout())
	s.c.Disconnect(0) // paho calls no lost handler for it
	s.connectionLost()
}

// waitArriving waits for done while messages keep arriving: it gives up
// once none has arrived (and none is waiting for the handler) for a
// connect timeout. result, when set, is the outcome once done.
func (s *Session) waitArriving(ctx context.Context, done <-chan struct{}, result func() error) error {
	start, limit := time.Now(), s.cfg.connectTimeout()
	tick := time.NewTicker(min(time.Second, limit))
	defer tick.Stop()
	for {
		select {
		case <-done:
			if result != nil {
				return result()
			}
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			quiet := s.q.quietSince(start)
			if b := s.beside.Load(); b != nil {
				quiet = min(quiet, b.quietSince(start))
			}
			if quiet > limit {
				return fmt.Errorf("nothing arrived for %v: %w", quiet.Round(time.Second), errTimeout)
			}
		}
	}
}

// ackCap bounds, in connect timeouts, the wait for an acknowledgement
// while messages keep arriving ahead of it.
const ackCap = 3

// waitAck waits for a publish's PUBACK. A broker sends it after whatever
// it is delivering to this session already — 100,000 retained statuses of
// a subscription just made take Mosquitto longer than a connect timeout
// on a loaded machine — so the wait goes on while messages arrive, up to
// ackCap connect timeouts; with nothing arriving it ends after one, and
// the connection is taken for stalled (stall.go).
func (s *Session) waitAck(ctx context.Context, tok paho.Token) error {
	limit := ackCap * s.cfg.connectTimeout()
	capped, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	err := s.waitArriving(capped, tok.Done(), tok.Error)
	if err != nil && ctx.Err() == nil && capped.Err() != nil {
		return fmt.Errorf("after %v: %w", limit, errTimeout)
	}
	return err
}
