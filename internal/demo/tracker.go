package demo

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/otad/otad/agent"
	"github.com/otad/otad/mqtt"
)

// Tracker follows the devices' retained status snapshots (SPEC §8), as the
// cloud side sees them, and tells when a rollout has settled on every device.
// It is safe for concurrent use.
type Tracker struct {
	prefix string
	now    func() time.Time

	mu      sync.Mutex
	devices map[string]*tracked
	rollout *rollout
}

type tracked struct {
	status   *agent.Status
	online   bool
	baseline *agent.ResultStatus // last result when the current rollout began
	finish   map[string]Finish   // by rollout ID
}

type rollout struct {
	id    string
	start time.Time
}

// Finish is how a rollout ended on one device.
type Finish struct {
	Result  string
	Code    string
	Took    time.Duration // from Begin to the settled status
	Booted  string        // the slot the device runs afterwards
	Running string        // the version in that slot
}

// NewTracker tracks devices under the topic prefix (empty: "ota").
func NewTracker(prefix string) *Tracker {
	return &Tracker{prefix: prefix, now: time.Now, devices: map[string]*tracked{}}
}

// Observe takes one message from mqtt.Watch. Malformed snapshots are ignored:
// they come from outside and the demo only trusts what it can decode.
func (t *Tracker) Observe(topic string, payload []byte) {
	id, leaf, ok := mqtt.DeviceOf(t.prefix, topic)
	if !ok || (leaf != "status" && leaf != "online") {
		return
	}
	var st agent.Status
	var on struct {
		Online bool `json:"online"`
	}
	switch leaf {
	case "status":
		if json.Unmarshal(payload, &st) != nil || st.Device != id {
			return
		}
	case "online":
		if json.Unmarshal(payload, &on) != nil {
			return
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	d := t.devices[id]
	if d == nil {
		d = &tracked{finish: map[string]Finish{}}
		t.devices[id] = d
	}
	if leaf == "online" {
		d.online = on.Online
		return
	}
	if d.status != nil && st.BootID == d.status.BootID && st.Seq < d.status.Seq {
		return // an older snapshot of this boot, delivered late
	}
	d.status = &st
	r := t.rollout
	if r == nil || !settled(st) || st.LastResult.ID != r.id {
		return
	}
	if _, done := d.finish[r.id]; done {
		return
	}
	d.finish[r.id] = Finish{
		Result: st.LastResult.Result, Code: st.LastResult.Code, Took: t.now().Sub(r.start),
		Booted: st.BootedSlot, Running: st.Slots[st.BootedSlot].Version,
	}
}

// settled: idle with an outcome, running a slot the agent vouches for. An
// agent that rejected the booted slot reports "idle, failed" once before it
// reboots out of it; that is not the end yet.
func settled(st agent.Status) bool {
	return st.State == agent.Idle && st.LastResult != nil && st.Slots[st.BootedSlot].Status == agent.SlotGood
}

// Begin starts following rollout id: outcomes for it count from now on.
func (t *Tracker) Begin(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rollout = &rollout{id: id, start: t.now()}
	for _, d := range t.devices {
		d.baseline = nil
		if d.status != nil && d.status.LastResult != nil {
			r := *d.status.LastResult
			d.baseline = &r
		}
	}
}

// Ready lists the devices not yet online and idle on a good slot.
func (t *Tracker) Ready(devices []string) (waiting []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range devices {
		d := t.devices[id]
		if d == nil || d.status == nil || !d.online || d.status.State != agent.Idle ||
			d.status.Slots[d.status.BootedSlot].Status != agent.SlotGood {
			waiting = append(waiting, id)
		}
	}
	return waiting
}

// Expect is the outcome a rollout should have on every device.
type Expect struct {
	Result string
	Code   string
}

func (e Expect) String() string {
	if e.Code == "" {
		return e.Result
	}
	return e.Result + "/" + e.Code
}

// Verdict is where the current rollout stands.
type Verdict struct {
	Pending []string // devices without an outcome yet
	Wrong   []string // "device: what happened instead", for outcomes other than expected
}

// Done reports whether every device ended as expected.
func (v Verdict) Done() bool { return len(v.Pending) == 0 && len(v.Wrong) == 0 }

// Check compares the current rollout's outcomes on devices with want.
func (t *Tracker) Check(devices []string, want Expect) Verdict {
	t.mu.Lock()
	defer t.mu.Unlock()
	var v Verdict
	if t.rollout == nil {
		return Verdict{Pending: slices.Clone(devices)}
	}
	for _, id := range devices {
		d := t.devices[id]
		if d == nil {
			v.Pending = append(v.Pending, id)
			continue
		}
		if f, ok := d.finish[t.rollout.id]; ok {
			if f.Result != want.Result || f.Code != want.Code {
				v.Wrong = append(v.Wrong, fmt.Sprintf("%s: %s, want %s", id, Expect{f.Result, f.Code}, want))
			}
			continue
		}
		// A refusal of a forged or garbled offer names no rollout: it still
		// ends this one on that device.
		if r := lastResult(d); r != nil && r.Result == agent.ResultRejected && !sameResult(r, d.baseline) {
			v.Wrong = append(v.Wrong, fmt.Sprintf("%s: offer refused: %s: %s", id, r.Code, r.Message))
			continue
		}
		v.Pending = append(v.Pending, id)
	}
	return v
}

func lastResult(d *tracked) *agent.ResultStatus {
	if d.status == nil {
		return nil
	}
	return d.status.LastResult
}

func sameResult(a, b *agent.ResultStatus) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// Finished is how rollout id ended on device.
func (t *Tracker) Finished(device, id string) (Finish, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	d := t.devices[device]
	if d == nil {
		return Finish{}, false
	}
	f, ok := d.finish[id]
	return f, ok
}

// Status is the device's latest status snapshot.
func (t *Tracker) Status(device string) (agent.Status, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	d := t.devices[device]
	if d == nil || d.status == nil {
		return agent.Status{}, false
	}
	return *d.status, true
}

// Describe says where each device stands, for a message when a rollout does
// not converge.
func (t *Tracker) Describe(devices []string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	ids := slices.Clone(devices)
	sort.Strings(ids)
	var out []string
	for _, id := range ids {
		d := t.devices[id]
		switch {
		case d == nil || d.status == nil:
			out = append(out, id+": no status received")
		default:
			s := d.status
			line := fmt.Sprintf("%s: state %s, booted %s", id, s.State, s.BootedSlot)
			if r := s.LastResult; r != nil {
				line += fmt.Sprintf(", last result %s %s", r.ID, Expect{r.Result, r.Code})
			}
			out = append(out, line)
		}
	}
	return out
}
