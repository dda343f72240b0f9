package controller

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/rollout"
)

// Tracker is the fleet as a controller follows it: one small entry per
// device (its place, whether it lists the group, what its status says of
// the offer), fed with the devices' status messages. At a million devices
// it holds about a hundred bytes each, where whole statuses would take
// gigabytes (bench/rollout measures it).
type Tracker struct {
	name, group, prefix string
	offer               rollout.Ref
	now                 func() time.Time

	// Bad, if set, hears of each status the tracker does not take and why
	// (an ID the contract forbids, another device's, not JSON, over the
	// read limit), for the controller's log; set it before the first
	// Message.
	Bad func(topic string, err error)

	mu      sync.RWMutex
	devices trackedDevices
	failed  map[string]Failure // the devices whose status says the offer failed
	due     time.Time          // the report request's answers are due
}

// Failure is a device whose status says the rollout's offer failed there,
// with the device's own code and message, for people (a halt names them).
type Failure struct {
	Device  string
	Result  ota.Result
	Code    ota.Code
	Message string
}

// maxFailureText bounds a failure's message kept: devices write it.
const maxFailureText = 300

type tracked struct {
	rollout.Device
	seq  uint64
	boot uint32 // FNV-1a of the boot ID: an older snapshot of the same boot is ignored
}

// NewTracker follows the devices under prefix for plan p (now nil: the
// wall clock).
func NewTracker(p *rollout.Plan, prefix string, now func() time.Time) *Tracker {
	if now == nil {
		now = time.Now
	}
	return &Tracker{name: p.Name, group: p.Group, prefix: prefix, offer: p.Offer.Ref(),
		now: now, devices: trackedDevices{}, failed: map[string]Failure{}}
}

// status is the part of a status snapshot a controller reads: decoding
// only these keeps a million statuses affordable.
type statusPart struct {
	Device      string            `json:"device"`
	Seq         uint64            `json:"seq"`
	BootID      string            `json:"boot_id"`
	Groups      []string          `json:"groups"`
	Target      *ota.TargetStatus `json:"target"`
	Pending     *ota.TargetStatus `json:"pending"`
	LastResult  *ota.Outcome      `json:"last_result"`
	LastRefusal *ota.Refusal      `json:"last_refusal"`
}

// Message takes one message of the devices' status topics (others are
// ignored) and reports whether it changed the fleet. An empty status (the
// retained one cleared) forgets the device; one that does not decode, is
// another device's, or is over the read limit is ignored.
func (t *Tracker) Message(m mqtt.Message) bool {
	id, leaf, ok := mqtt.DeviceOf(t.prefix, m.Topic)
	if !ok || leaf != "status" {
		return false
	}
	if err := m.TooLarge("status of device " + id); err != nil {
		return t.bad(m.Topic, err)
	}
	if len(m.Payload) == 0 {
		t.mu.Lock()
		defer t.mu.Unlock()
		_, had := t.devices[id]
		delete(t.devices, id)
		delete(t.failed, id)
		return had
	}
	var st statusPart
	if err := json.Unmarshal(m.Payload, &st); err != nil {
		return t.bad(m.Topic, fmt.Errorf("status snapshot: %w", err))
	}
	// An ID no device may have is never in a wave: its offer topic is not
	// one level on every broker (docs/contract/mqtt.md, names), so the
	// offer would go elsewhere and the wave wait out device_timeout.
	if err := mqtt.CheckStatusTopic(id, st.Device); err != nil {
		return t.bad(m.Topic, err)
	}
	h := fnv.New32a()
	h.Write([]byte(st.BootID))
	boot := h.Sum32()
	full := ota.Status{Device: st.Device, Groups: st.Groups, Target: st.Target, Pending: st.Pending,
		LastResult: st.LastResult, LastRefusal: st.LastRefusal}
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	prev := t.devices[id]
	if prev != nil && prev.boot == boot && st.Seq < prev.seq {
		return false // an older snapshot of this boot, delivered late
	}
	var pd *rollout.Device
	if prev != nil {
		pd = &prev.Device
	}
	d := rollout.Observed(t.name, t.group, t.offer, id, full, pd, now)
	if prev != nil && prev.Device == d && prev.seq == st.Seq {
		return false
	}
	t.devices[id] = &tracked{Device: d, seq: st.Seq, boot: boot}
	// Only failures are kept whole: they are few, and a halt names them.
	if o := rollout.OutcomeOf(full, t.offer); o.Ended() && rollout.IsFailure(o.Result) {
		msg := o.Message
		if len(msg) > maxFailureText {
			msg = strings.ToValidUTF8(msg[:maxFailureText], "") + "…"
		}
		t.failed[id] = Failure{Device: id, Result: o.Result, Code: o.Code, Message: msg}
	} else if o.Ended() {
		delete(t.failed, id)
	}
	return true
}

// bad reports a status not taken (Bad); it changes nothing.
func (t *Tracker) bad(topic string, err error) bool {
	if t.Bad != nil {
		t.Bad(topic, err)
	}
	return false
}

// Failures are the devices heard of whose status says the offer failed,
// by ID, at most n of them, and how many there are.
func (t *Tracker) Failures(n int) ([]Failure, int) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]Failure, 0, len(t.failed))
	for _, f := range t.failed {
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b Failure) int { return strings.Compare(a.Device, b.Device) })
	return out[:min(n, len(out))], len(out)
}

// Asked notes a report request sent at, answered within window.
func (t *Tracker) Asked(at time.Time, window time.Duration) {
	t.mu.Lock()
	t.due = at.Add(window + answerGrace)
	t.mu.Unlock()
}

// answerGrace is how long after a request's window answers may still be
// on their way.
const answerGrace = time.Second

// AnswersDue is when the report request's answers are due (Fleet).
func (t *Tracker) AnswersDue() time.Time {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.due
}

// Len is how many devices have been heard of (Fleet).
func (t *Tracker) Len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.devices)
}

// Counts counts the devices heard of, and those listing the group.
func (t *Tracker) Counts() (devices, inGroup int) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	for _, d := range t.devices {
		if d.InGroup {
			inGroup++
		}
	}
	return len(t.devices), inGroup
}

// Fleet is the Driver's Fleet: the devices as seen, under the tracker's
// read lock, ready as o says.
func (t *Tracker) Fleet(o *Observer) func(fn func(rollout.View)) {
	return func(fn func(rollout.View)) {
		ready := o.Ready()
		t.mu.RLock()
		defer t.mu.RUnlock()
		fn(rollout.View{Ready: ready, Devices: t.devices})
	}
}

// trackedDevices is the Devices a Tracker holds.
type trackedDevices map[string]*tracked

func (m trackedDevices) Each(fn func(string, rollout.Device)) {
	for id, d := range m {
		fn(id, d.Device)
	}
}

func (m trackedDevices) Lookup(id string) (rollout.Device, bool) {
	if d, ok := m[id]; ok {
		return d.Device, true
	}
	return rollout.Device{}, false
}

func (m trackedDevices) Len() int { return len(m) }
