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
	for _, tt := range []struct {
		name string
		m    mqtt.Message
		id   string
		want []string // in bad_status
	}{
		{"over the read limit", mqtt.Message{Topic: "ota/devices/evil9/status", Oversized: 200_000}, "evil9",
			[]string{"too_large", "status of device evil9 on ota/devices/evil9/status", "200000 bytes", "limit of 131072"}},
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
		})
	}
}
