package fleetview

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/rollout"
)

// View collects the device topics' messages; it is safe for concurrent use.
type View struct {
	prefix string
	now    func() time.Time

	mu      sync.Mutex
	devices map[string]*record // the devices heard of by a status; never forgotten
	aside   aside              // the presence of devices not in it yet
	order   []placed           // the devices sorted by ID (orderLocked)
	follow  *follow            // the offer Begin follows; nil before
	asked   *asked             // the report request sent; nil before
}

// record is what the view knows of one device.
type record struct {
	online     *bool // nil: unknown, or not understood
	status     *ota.Status
	statusErr  error // the last status did not decode
	progress   *ota.Progress
	progressAt time.Time
	baseline   *ota.Refusal      // the last refusal when the followed offer began
	finish     map[string]Finish // by the offer's key
	// How its statuses arrived, for Coverage: delivered retained on
	// subscribing, and published while the view listened (an answer to the
	// report request, or a change).
	retained, live bool
	firstLive      time.Time // when it was first heard live
	// connected: it announced itself online while the view listened (it
	// connected since the view subscribed), so no retained status of it
	// need have been there to deliver.
	connected bool
	events    eventLog // the last events heard (FollowOptions.Events)
}

// follow is the offer Begin follows.
type follow struct {
	offer rollout.Ref
	start time.Time
}

// New follows the devices under the topic prefix (empty: "ota").
func New(prefix string) *View {
	return &View{prefix: prefix, now: time.Now, devices: map[string]*record{}}
}

// Watch subscribes to every device's topics on the broker cfg names and
// feeds them into v until ctx ends; changed (if not nil) is called after a
// message that changed the view. It returns early only when it cannot
// connect or subscribe.
func (v *View) Watch(ctx context.Context, cfg mqtt.Config, changed func()) error {
	return mqtt.Watch(ctx, cfg, func(m mqtt.Message) {
		if v.ObserveMessage(m) && changed != nil {
			changed()
		}
	})
}

// Observe takes one message from the broker and reports whether the view
// changed. Payloads come from outside: what does not decode is shown as a
// bad status, or skipped (progress, QoS 0, is best effort).
func (v *View) Observe(topic string, payload []byte) bool {
	return v.ObserveMessage(mqtt.Message{Topic: topic, Payload: payload})
}

// ObserveMessage is Observe of a message whose retained flag is known, so
// that Coverage can tell the statuses heard live from retained ones.
func (v *View) ObserveMessage(m mqtt.Message) bool {
	topic, payload := m.Topic, m.Payload
	id, leaf, ok := mqtt.DeviceOf(v.prefix, topic)
	if !ok {
		return false
	}
	var (
		st     *ota.Status
		stErr  error
		online *bool
		p      ota.Progress
		ev     ota.Event
	)
	switch leaf {
	case "status":
		switch {
		case m.Oversized > 0: // dropped unread: a bad status, not a cleared one
			stErr = m.TooLarge("status of device " + id)
		case len(payload) > 0: // empty: the retained status was cleared
			st, stErr = decodeStatus(payload)
		}
		if st != nil {
			if err := mqtt.CheckStatusTopic(id, st.Device); err != nil {
				st, stErr = nil, err // a bad ID is never counted in a group (rollout check)
			}
		}
	case "online":
		var o struct {
			Online *bool `json:"online"`
		}
		if json.Unmarshal(payload, &o) == nil {
			online = o.Online
		}
	case "progress":
		if json.Unmarshal(payload, &p) != nil {
			return false
		}
	case "events":
		var ok bool
		if ev, ok = decodeEvent(payload); !ok || ev.Device != id {
			return false // best effort, as progress
		}
	default:
		return false
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	d := v.recordLocked(id, leaf, st != nil || stErr != nil, online, !m.Retained && online != nil && *online)
	if d == nil {
		return false
	}
	switch leaf {
	case "online":
		d.online = online
		d.connected = d.connected || (!m.Retained && online != nil && *online)
	case "progress":
		d.progress, d.progressAt = &p, v.now()
	case "events":
		d.events.add(ev)
	case "status":
		if st != nil {
			d.retained = d.retained || m.Retained
			d.live = d.live || !m.Retained
			if !m.Retained && d.firstLive.IsZero() {
				d.firstLive = v.now()
			}
		}
		if st != nil && d.status != nil && st.BootID == d.status.BootID && st.Seq < d.status.Seq {
			return false // an older snapshot of this boot, delivered late
		}
		d.status, d.statusErr = st, stErr
		if st != nil {
			v.noteFinish(d, *st)
		}
	}
	return true
}

// maxAside bounds the devices whose presence a view keeps before their
// status arrives (a fleet's retained presences may be delivered before its
// statuses): 16,384 of the longest IDs take under 4 MiB, where a flood of
// presence messages for made-up devices would otherwise grow the view for
// good (docs/contract/mqtt.md, report requests).
const maxAside = 1 << 14

// aside is the presence of devices heard of without a status: at most
// maxAside, the first heard dropped first.
type aside struct {
	ids  map[string]heard
	ring []string // the IDs in the order first heard (some taken since)
	next int      // the oldest in ring, once it is full
}

// heard is a presence in a byte: a few dozen bytes a device in all.
type heard uint8

const (
	heardKnown     heard = 1 << iota // a presence that decoded
	heardOnline                      // it said online
	heardConnected                   // it went online while the view listened (record.connected)
)

// note keeps device id's presence.
func (a *aside) note(id string, online *bool, connected bool) {
	if a.ids == nil {
		a.ids = map[string]heard{}
	}
	h, known := a.ids[id]
	if !known {
		if len(a.ring) < maxAside {
			a.ring = append(a.ring, id)
		} else {
			delete(a.ids, a.ring[a.next])
			a.ring[a.next] = id
			a.next = (a.next + 1) % maxAside
		}
	}
	h &= heardConnected
	if online != nil {
		h |= heardKnown
		if *online {
			h |= heardOnline
		}
	}
	if connected {
		h |= heardConnected
	}
	a.ids[id] = h
}

// take removes device id's presence, for its record.
func (a *aside) take(id string) (online *bool, connected bool) {
	h := a.ids[id]
	delete(a.ids, id)
	if h&heardKnown != 0 {
		on := h&heardOnline != 0
		online = &on
	}
	return online, h&heardConnected != 0
}

// recordLocked is device id's record for a message on its leaf topic
// (status: one that decoded or is bad), nil when it makes none.
func (v *View) recordLocked(id, leaf string, status bool, online *bool, connected bool) *record {
	if d := v.devices[id]; d != nil {
		return d
	}
	// Only a status snapshot makes a device (docs/contract/mqtt.md,
	// report requests): presence, progress and events are anyone's to
	// publish, QoS 0 and unbounded in number, and a device entry is never
	// forgotten. Presence is set aside, bounded, for the status that
	// retained delivery may bring after it; progress and events are
	// dropped until the status comes (the next report shows).
	switch {
	case leaf == "online":
		v.aside.note(id, online, connected)
		return nil
	case leaf != "status", !status: // or a cleared status of no device
		return nil
	}
	d := &record{finish: map[string]Finish{}}
	d.online, d.connected = v.aside.take(id)
	v.devices[id] = d
	return d
}

// Bounds on a status snapshot read from the broker (docs/contract/rollouts.md,
// reads are bounded): the view keeps each device's, and loops over its
// groups and slots.
const (
	maxStatusSize = 128 << 10
	maxGroups     = 256
	maxSlots      = 8
)

// decodeStatus decodes a status snapshot from the broker (outside input),
// its size and lists within their bounds.
func decodeStatus(b []byte) (*ota.Status, error) {
	if len(b) > maxStatusSize {
		return nil, fmt.Errorf("status snapshot of %d bytes, over the limit of %d", len(b), maxStatusSize)
	}
	var s ota.Status
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("status snapshot: %w", err)
	}
	switch {
	case len(s.Groups) > maxGroups:
		return nil, fmt.Errorf("status snapshot: groups: %d, at most %d", len(s.Groups), maxGroups)
	case len(s.Slots) > maxSlots:
		return nil, fmt.Errorf("status snapshot: slots: %d, at most %d", len(s.Slots), maxSlots)
	}
	return &s, nil
}

// noteFinish records how the followed offer ended on d, once the device
// has settled (rollout.OutcomeOf): what it runs then is where it ended.
func (v *View) noteFinish(d *record, st ota.Status) {
	f := v.follow
	if f == nil {
		return
	}
	if _, done := d.finish[key(f.offer)]; done {
		return
	}
	o := rollout.OutcomeOf(st, f.offer)
	if !o.Ended() || !o.Settled {
		return
	}
	fin := Finish{Outcome: o, Took: v.now().Sub(f.start), Booted: st.BootedSlot, Running: st.Slots[st.BootedSlot].Version}
	if r := st.LastResult; r != nil && f.offer.Names(r.ID, r.SHA256, r.ManifestSHA256) {
		fin.Transfer = r.Transfer
	}
	d.finish[key(f.offer)] = fin
}

// Len is how many devices have been heard of by a status.
func (v *View) Len() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.devices)
}

// Status is the device's latest status snapshot.
func (v *View) Status(id string) (ota.Status, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	d := v.devices[id]
	if d == nil || d.status == nil {
		return ota.Status{}, false
	}
	return *d.status, true
}

// Each calls fn with every device's latest status, under the view's lock
// (fn must not call back into v); devices without a status are skipped.
func (v *View) Each(fn func(id string, st ota.Status)) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for id, d := range v.devices {
		if d.status != nil {
			fn(id, *d.status)
		}
	}
}

// Count is how many devices' latest status satisfies ok.
func (v *View) Count(ok func(ota.Status) bool) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	n := 0
	for _, d := range v.devices {
		if d.status != nil && ok(*d.status) {
			n++
		}
	}
	return n
}

// Ready lists the devices of ids not yet online and idle on a good slot.
func (v *View) Ready(ids []string) (waiting []string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, id := range ids {
		d := v.devices[id]
		if d == nil || d.status == nil || d.online == nil || !*d.online || d.status.State != ota.Idle ||
			d.status.Slots[d.status.BootedSlot].Status != ota.SlotGood {
			waiting = append(waiting, id)
		}
	}
	return waiting
}
