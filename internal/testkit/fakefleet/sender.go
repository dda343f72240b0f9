package fakefleet

import (
	"sync"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// sender publishes what one client says for its share of the devices,
// retained at QoS 1, a window of them in flight at a time. Fired without
// one, a million answers to a report request left tens of thousands in
// flight per client, and paho looks for a free message ID by scanning the
// ones in use: the fleet spent a core there and fell minutes behind the
// controller (make bench-rollout at 1,000,000 devices).
type sender struct {
	c    paho.Client
	mu   sync.Mutex
	todo []publish
	wake chan struct{}
}

// publish is one message to send; its payload is made when it is sent, so
// a status queued behind others is the device's status then, not a stale
// one written over a newer.
type publish struct {
	topic   string
	payload func() []byte
}

// sendWindow is the publishes a sender has in flight at most.
const sendWindow = 512

func newSender(c paho.Client, done <-chan struct{}) *sender {
	s := &sender{c: c, wake: make(chan struct{}, 1)}
	go s.run(done)
	return s
}

// send queues a publish; it never blocks (it runs in paho's handlers).
func (s *sender) send(topic string, payload func() []byte) {
	s.mu.Lock()
	s.todo = append(s.todo, publish{topic, payload})
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *sender) run(done <-chan struct{}) {
	toks := make([]paho.Token, 0, sendWindow)
	drain := func() {
		for _, tok := range toks {
			tok.WaitTimeout(time.Minute) // a lost answer is the test's to notice, as a device's would be
		}
		toks = toks[:0]
	}
	for {
		s.mu.Lock()
		batch := s.todo
		s.todo = nil
		s.mu.Unlock()
		if len(batch) == 0 {
			select {
			case <-s.wake:
				continue
			case <-done:
				return
			}
		}
		for _, p := range batch {
			toks = append(toks, s.c.Publish(p.topic, 1, true, p.payload()))
			if len(toks) == sendWindow {
				drain()
			}
		}
		drain()
	}
}
