package mqtt

import "errors"

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
