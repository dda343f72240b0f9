package controller

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/rollout"

	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/ota"
)

// The tracker keeps what a controller needs of each status, and the rules
// of a fleet view: an older snapshot of the same boot is ignored, a
// cleared status forgets the device, a status over the read limit or of
// another device is ignored, and a decided outcome stays when a later
// status is about another image.
func TestTracker(t *testing.T) {
	p := testPlan(5, 1, rollout.Wave{Percent: 100})
	now := t0
	tr := NewTracker(p, "ota", func() time.Time { return now })
	msg := func(id string, seq uint64, boot, what string) mqtt.Message {
		st := status(id, what)
		st.Seq, st.BootID = seq, boot
		b, _ := json.Marshal(st)
		return mqtt.Message{Topic: "ota/devices/" + id + "/status", Payload: b}
	}
	get := func(id string) (rollout.Device, bool) {
		var d rollout.Device
		var ok bool
		tr.Fleet(NewObserver(tr, 0, nil))(func(v rollout.View) { d, ok = v.Devices.Lookup(id) })
		return d, ok
	}
	steps := []struct {
		name    string
		m       mqtt.Message
		changed bool
		id      string
		want    *rollout.Device // nil: not there
	}{
		{"a device in the group", msg("d1", 1, "b1", ""), true, "d1", &rollout.Device{InGroup: true, Seen: t0}},
		{"the same again", msg("d1", 1, "b1", ""), false, "d1", &rollout.Device{InGroup: true, Seen: t0}},
		{"installing the offer", msg("d1", 2, "b1", "installing"), true, "d1", &rollout.Device{InGroup: true, Working: true, Seen: t0}},
		{"an older snapshot of the boot", msg("d1", 1, "b1", ""), false, "d1", &rollout.Device{InGroup: true, Working: true, Seen: t0}},
		{"its outcome", msg("d1", 3, "b1", "success"), true, "d1", &rollout.Device{InGroup: true, Outcome: ota.ResultSuccess, Seen: t0}},
		{"a new boot, another image: the outcome stays", msg("d1", 1, "b2", "old-success"), true, "d1",
			&rollout.Device{InGroup: true, Outcome: ota.ResultSuccess, Moved: true, Seen: t0}},
		{"out of the group", msg("d2", 1, "b", "out"), true, "d2", &rollout.Device{Seen: t0}},
		{"another device's status", mqtt.Message{Topic: "ota/devices/d3/status", Payload: msg("d4", 1, "b", "").Payload}, false, "d3", nil},
		{"over the limit", mqtt.Message{Topic: "ota/devices/d3/status", Oversized: 200000}, false, "d3", nil},
		{"not JSON", mqtt.Message{Topic: "ota/devices/d3/status", Payload: []byte("{")}, false, "d3", nil},
		{"presence is not a status", mqtt.Message{Topic: "ota/devices/d3/online", Payload: []byte(`{"online":true}`)}, false, "d3", nil},
		{"cleared", mqtt.Message{Topic: "ota/devices/d2/status"}, true, "d2", nil},
	}
	for _, st := range steps {
		if got := tr.Message(st.m); got != st.changed {
			t.Errorf("%s: changed %v, want %v", st.name, got, st.changed)
		}
		d, ok := get(st.id)
		if st.want == nil {
			if ok {
				t.Errorf("%s: %s is there: %+v", st.name, st.id, d)
			}
			continue
		}
		want := *st.want
		want.Place = rollout.PlaceOf(p.Name, st.id)
		if !ok || d != want {
			t.Errorf("%s: %+v, want %+v", st.name, d, want)
		}
	}
	if n, in := tr.Counts(); n != 1 || in != 1 {
		t.Errorf("counts %d, %d", n, in)
	}
}

// A status on the topic of an ID the contract forbids (docs/contract/mqtt.md,
// names) is never tracked, so never in a group or a wave (its offer would
// go to another topic, and the wave wait out device_timeout), and the
// tracker says why, naming the ID and the rule.
func TestTrackerRefusesBadIDs(t *testing.T) {
	p := testPlan(5, 1, rollout.Wave{Percent: 100})
	for _, tt := range []struct {
		name, id string
		want     []string // in the error Bad hears
	}{
		{"a dot", "x.y", []string{`"x.y"`, "only A-Z, a-z, 0-9, '_' and '-'"}},
		{"a space", "gw 1", []string{`"gw 1"`, "only A-Z"}},
		{"non-ASCII", "gw-é", []string{`"gw-é"`, "non-ASCII"}},
		{"300 bytes", strings.Repeat("d", 300), []string{"300 bytes, at most 128"}},
		{"the longest allowed", strings.Repeat("d", 128), nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tr := NewTracker(p, "ota", func() time.Time { return t0 })
			var heard []error
			tr.Bad = func(topic string, err error) { heard = append(heard, err) }
			b, _ := json.Marshal(status(tt.id, ""))
			changed := tr.Message(mqtt.Message{Topic: "ota/devices/" + tt.id + "/status", Payload: b})
			n, in := tr.Counts()
			if tt.want == nil {
				if !changed || n != 1 || in != 1 || len(heard) != 0 {
					t.Errorf("a good ID: changed %v, %d devices, %d in the group, bad %v", changed, n, in, heard)
				}
				return
			}
			if changed || n != 0 || in != 0 {
				t.Errorf("changed %v, %d devices, %d in the group; want none", changed, n, in)
			}
			if len(heard) != 1 {
				t.Fatalf("Bad heard %v, want one error", heard)
			}
			for _, w := range tt.want {
				if !strings.Contains(heard[0].Error(), w) {
					t.Errorf("%q does not say %q", heard[0], w)
				}
			}
			if !errors.Is(heard[0], mqtt.ErrName) {
				t.Errorf("%v is not mqtt.ErrName", heard[0])
			}
		})
	}
}
