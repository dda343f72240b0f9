package fleetview

import (
	"strings"
	"testing"

	"github.com/otad/otad/mqtt"
)

// A status the view cannot take is shown as a bad status saying why
// (docs/contract/mqtt.md): never as a device without one, whose "none"
// state hides that something wrote its topic.
func TestBadStatusSaysWhy(t *testing.T) {
	long := strings.Repeat("d", 300)
	for _, tt := range []struct {
		name string
		m    mqtt.Message
		id   string
		want []string // in bad_status
	}{
		{"over the read limit", mqtt.Message{Topic: "ota/devices/evil9/status", Oversized: 200_000}, "evil9",
			[]string{"too_large", "status of device evil9 on ota/devices/evil9/status", "200000 bytes", "limit of 131072"}},
		{"an ID with a dot", mqtt.Message{Topic: "ota/devices/x.y/status", Payload: []byte(`{"device":"x.y","state":"idle","groups":["lab"]}`)}, "x.y",
			[]string{`device ID "x.y"`, "only A-Z, a-z, 0-9, '_' and '-'"}},
		{"an ID with a space", mqtt.Message{Topic: "ota/devices/gw 1/status", Payload: []byte(`{"device":"gw 1","state":"idle","groups":["lab"]}`)}, "gw 1",
			[]string{`device ID "gw 1"`, "only A-Z"}},
		{"a 300-byte ID", mqtt.Message{Topic: "ota/devices/" + long + "/status", Payload: []byte(`{"device":"` + long + `","state":"idle","groups":["lab"]}`)}, long,
			[]string{"300 bytes, at most 128"}},
		{"no device field", mqtt.Message{Topic: "ota/devices/evil10/status", Payload: []byte(`{"state":"idle"}`)}, "evil10",
			[]string{"status snapshot on evil10's topic: its device field is missing"}},
		{"another device's", mqtt.Message{Topic: "ota/devices/evil10/status", Payload: []byte(`{"device":"gw-1","state":"idle"}`)}, "evil10",
			[]string{`status snapshot of device "gw-1" on evil10's topic`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v := New("ota")
			if !v.ObserveMessage(tt.m) {
				t.Fatal("not taken")
			}
			d, _, ok := v.Device(tt.id)
			if !ok {
				t.Fatalf("device %q not in the view", tt.id)
			}
			for _, w := range tt.want {
				if !strings.Contains(d.BadStatus, w) {
					t.Errorf("bad_status %q does not say %q", d.BadStatus, w)
				}
			}
			if s := v.Summary(Filter{}); s.States[StateBad] != 1 || s.States[StateNone] != 0 {
				t.Errorf("states %v, want 1 bad", s.States)
			}
			if n := v.Query(Filter{Group: "lab"}, 0, 0).Total; n != 0 {
				t.Errorf("%d devices in its group, want none", n)
			}
		})
	}
}
