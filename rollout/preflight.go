package rollout

import (
	"fmt"
	"math"
	"strings"
)

// DefaultBrokerQueue is the messages a broker is taken to queue for one
// client before it drops what comes next, unless the operator states its
// setting: the smallest default among the brokers docs/brokers.md lists
// (Mosquitto's max_queued_messages and EMQX's mqtt.max_mqueue_len, 1,000;
// RabbitMQ has none).
const DefaultBrokerQueue = 1000

// BrokerQueueError is a plan whose offers would draw more answers to the
// controller's one connection at once than the broker queues for a client
// (docs/brokers.md, a large fleet): the broker would drop the rest, and
// the controller would wait for outcomes it was never sent.
type BrokerQueueError struct {
	Rollout string
	What    string // what draws the answers: "wave 2 (40000 devices, no [rate])", "the pace of 120000 offers a minute"
	Need    int    // the queue it needs, in messages
	Queue   int    // the queue the broker has (stated or DefaultBrokerQueue)
	Paced   bool   // a [rate] that is too fast (else a wave without one)
}

func (e *BrokerQueueError) Error() string {
	fix := fmt.Sprintf("pace the waves ([rate] max_per_minute %d at most)", 60*e.Queue)
	if e.Paced {
		fix = fmt.Sprintf("lower [rate] max_per_minute to %d at most", 60*e.Queue)
	}
	return fmt.Sprintf("rollout %s: %s draws up to %d answers at once to the controller's one connection, "+
		"and the broker queues %d messages for a client before it drops the rest "+
		"(Mosquitto's max_queued_messages, EMQX's mqtt.max_mqueue_len: 1000 by default; docs/brokers.md, a large fleet): "+
		"raise that setting to %d or more and say so with --broker-queue %d (0: no limit, as RabbitMQ), or %s",
		e.Rollout, e.What, e.Need, e.Queue, e.Need, e.Need, fix)
}

// PacePreflight checks, before the controller publishes anything, that the
// plan's pace fits a broker queueing queue messages a client (0: no
// limit): the devices answer each offer with a status, so a second's
// offers at the pace's ceiling are a second's answers on the controller's
// connection, and the controller is taken to read a second's worth behind
// at most. A wave without a pace needs the fleet's size (WavePreflight).
func PacePreflight(p *Plan, queue int) error {
	if queue <= 0 || p.Rate == nil {
		return nil
	}
	if need := int(math.Ceil(p.Rate.Max / 60)); need > queue {
		return &BrokerQueueError{Rollout: p.Name, What: fmt.Sprintf("the pace of %.0f offers a minute", p.Rate.Max), Need: need, Queue: queue, Paced: true}
	}
	return nil
}

// WavePreflight checks, before the first offer, that no wave offered
// without a pace is larger than the broker's queue for a client: its
// offers go out as fast as the broker takes them, so every member's
// answer may wait for the controller at once. inGroup is the group's
// devices as seen; the waves are sized as Assign sizes them (a named
// wave by its names, a percent wave by its share of the group).
func WavePreflight(p *Plan, inGroup, queue int) error {
	if queue <= 0 || p.Rate != nil {
		return nil
	}
	// The largest wave names the queue the whole plan needs.
	largest, size := 0, 0
	for i, n := range waveSizes(p, inGroup) {
		if n > size {
			largest, size = i, n
		}
	}
	if size <= queue {
		return nil
	}
	return &BrokerQueueError{Rollout: p.Name, What: fmt.Sprintf("wave %d (%d devices, no [rate])", largest+1, size), Need: size, Queue: queue}
}

// waveSizes are the waves' sizes over a group of n devices: a named wave
// its names, a percent wave the shortfall of its cumulative share (at
// most what is left of the group).
func waveSizes(p *Plan, n int) []int {
	sizes := make([]int, len(p.Waves))
	taken := 0
	for i, w := range p.Waves {
		if w.Devices != nil {
			sizes[i] = len(w.Devices)
			taken += len(w.Devices)
			continue
		}
		sizes[i] = max(0, min(percentTarget(w.Percent, n)-taken, n-taken))
		taken += sizes[i]
	}
	return sizes
}

// EmptyGroup says what a rollout in state s does while no device's status
// lists the plan's group (rule 1), for the controller to tell when its
// view of the fleet finds the group empty: the named waves still to start
// offer their devices all the same; the first percent wave to start waits,
// offering nothing, until a device of the group is seen. "" when no wave
// still to start waits for the group, or the rollout offers nothing more.
func EmptyGroup(p *Plan, s State) string {
	if s.Terminal() || s.Halted != nil {
		return ""
	}
	var parts []string
	for i := max(s.Wave, 0); i < len(p.Waves); i++ {
		w := p.Waves[i]
		if w.Devices == nil {
			parts = append(parts, fmt.Sprintf("wave %d (%v%%) and the percent waves after it wait, offering nothing, "+
				"until a device whose status lists the group is seen; this controller keeps running (state waiting) and starts them then", i+1, w.Percent))
			return fmt.Sprintf("group %s: no device's status lists it (yet): %s", p.Group, strings.Join(parts, "; "))
		}
		plural := "s"
		if len(w.Devices) == 1 {
			plural = ""
		}
		parts = append(parts, fmt.Sprintf("wave %d offers its %d named device%s all the same (one never heard of times out after device_timeout %v and counts as failed)",
			i+1, len(w.Devices), plural, p.Halt.DeviceTimeout))
	}
	return ""
}
