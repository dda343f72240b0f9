package mqtt

import (
	"time"
)

func (d *Conn) kick() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// sendLoop is the only caller of Publish, so publishes keep their order and callers never
// wait on the network.
func (d *Conn) sendLoop() {
	defer d.loopsDone.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-d.ctx.Done():
			d.flush() // what is queued goes out before Close's offline message
			return
		case <-d.wake:
		case <-timer.C:
		}
		if wait := d.flush(); wait > 0 {
			timer.Reset(wait)
		}
	}
}

// flush publishes what is pending if connected; it returns how long a held-back progress
// message has to wait, or 0.
func (d *Conn) flush() time.Duration {
	d.mu.Lock()
	if !d.connected {
		d.mu.Unlock()
		return 0
	}
	online := d.onlinePending
	d.onlinePending = false
	var status []byte
	if d.statusPending {
		status, d.statusPending = d.status, false
	}
	events := d.events
	d.events = nil
	var progress []byte
	var wait time.Duration
	if d.progress != nil {
		if since := time.Since(d.progressAt); since >= progressInterval {
			progress, d.progress, d.progressAt = d.progress, nil, time.Now()
		} else {
			wait = progressInterval - since
		}
	}
	d.mu.Unlock()

	// QoS 1 messages handed over here are kept in paho's store if the connection drops.
	if online {
		d.publish(d.topics.Online(), 1, true, onlinePayload)
	}
	if status != nil {
		d.publish(d.topics.Status(), 1, true, status)
	}
	for _, e := range events {
		d.publish(d.topics.Events(), 1, false, e)
	}
	if progress != nil {
		d.publish(d.topics.Progress(), 0, false, progress)
	}
	return wait
}

func (d *Conn) publish(topic string, qos byte, retained bool, payload []byte) {
	tok := d.client.Publish(topic, qos, retained, payload)
	// Publish fails at once only when paho is not connecting at all; the delivery itself
	// completes later and is paho's to retry.
	select {
	case <-tok.Done():
		if err := tok.Error(); err != nil {
			d.log.Warn("mqtt: publish failed", "topic", topic, "err", err)
		}
	default:
	}
}

// PublishStatus publishes the retained status snapshot (QoS 1). Only the latest matters:
// while disconnected it is kept and published on the next connect.
func (d *Conn) PublishStatus(payload []byte) {
	d.mu.Lock()
	d.status = append([]byte(nil), payload...)
	d.statusPending = true
	d.mu.Unlock()
	d.kick()
}

// PublishEvent publishes one event (QoS 1, not retained). Events raised while
// disconnected are queued (at most 1000, oldest dropped first).
func (d *Conn) PublishEvent(payload []byte) {
	d.mu.Lock()
	if len(d.events) >= maxQueuedEvents {
		d.events = d.events[1:]
		d.log.Warn("mqtt: event queue full, oldest event dropped")
	}
	d.events = append(d.events, append([]byte(nil), payload...))
	d.mu.Unlock()
	d.kick()
}

// PublishProgress publishes progress (QoS 0, not retained), at most 2 per second: a
// newer message replaces one that is still held back, so the last of a burst goes out.
// Progress raised while disconnected is dropped.
func (d *Conn) PublishProgress(payload []byte) {
	d.mu.Lock()
	if !d.connected {
		d.mu.Unlock()
		return
	}
	d.progress = append([]byte(nil), payload...)
	d.mu.Unlock()
	d.kick()
}
