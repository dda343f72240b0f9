package fleetview

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/otad/otad/mqtt"
)

// A status snapshot's lists are bounded where it is decoded.
func TestDecodeStatusBounds(t *testing.T) {
	groups := make([]string, maxGroups+1)
	for i := range groups {
		groups[i] = fmt.Sprint("g", i)
	}
	many, _ := json.Marshal(map[string]any{"device": "d1", "groups": groups})
	slots := `{"device":"d1","slots":{` + strings.TrimSuffix(strings.Repeat(`"X":{},`, 1), ",")
	for i := range maxSlots + 1 {
		slots += fmt.Sprintf(`,"S%d":{}`, i)
	}
	slots += "}}"
	for _, c := range []struct{ payload, want string }{
		{string(many), "groups: 257, at most 256"},
		{slots, "slots: 10, at most 8"},
		{`{"device":"d1","message":"` + strings.Repeat("x", maxStatusSize) + `"}`, "over the limit of 131072"},
	} {
		if _, err := decodeStatus([]byte(c.payload)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%.40s: %v, want %q", c.payload, err, c.want)
		}
	}
	if _, err := decodeStatus([]byte(`{"device":"d1","groups":["eu"],"slots":{"A":{},"B":{}}}`)); err != nil {
		t.Errorf("a good status: %v", err)
	}
}

// Presence, progress and events are anyone's to publish, QoS 0 and without
// number: a device heard of only by them is no device of the view, and
// what the view sets aside for it is bounded (docs/contract/mqtt.md,
// report requests). 100,000 made-up devices' progress and presence made
// 100,000 permanent entries (17 MB → 260 MB RSS in the dashboard).
func TestGhostDevicesBounded(t *testing.T) {
	const ghosts = 100_000
	for _, tt := range []struct {
		leaf, payload string
	}{
		{"progress", `{"id":"r1","bytes_done":1,"bytes_total":2}`},
		{"online", `{"online":true}`},
		{"events", `{"device":"%s","seq":1,"from":"idle","to":"downloading"}`},
	} {
		t.Run(tt.leaf, func(t *testing.T) {
			v := New("ota")
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			for i := range ghosts {
				id := fmt.Sprintf("ghost%06d%s", i, strings.Repeat("g", 128-11)) // the longest IDs: the most memory
				payload := tt.payload
				if strings.Contains(payload, "%s") {
					payload = fmt.Sprintf(payload, id)
				}
				v.ObserveMessage(mqtt.Message{Topic: "ota/devices/" + id + "/" + tt.leaf, Payload: []byte(payload)})
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
			t.Logf("%d %s messages: heap %+.1f MiB", ghosts, tt.leaf, float64(grew)/(1<<20))
			if n := v.Len(); n != 0 {
				t.Errorf("%d devices in the view, want none", n)
			}
			if s := v.Summary(Filter{}); s.Devices != 0 {
				t.Errorf("summary counts %d devices", s.Devices)
			}
			if grew > 16<<20 {
				t.Errorf("the view grew by %d MiB, want under 16", grew>>20)
			}
			runtime.KeepAlive(v)
		})
	}

	// A real device's presence before its status is kept for it, after a
	// flood too; the flood's first are dropped first.
	v := New("ota")
	for i := range maxAside + 10 {
		v.ObserveMessage(mqtt.Message{Topic: fmt.Sprintf("ota/devices/ghost%06d/online", i), Payload: []byte(`{"online":true}`)})
	}
	v.ObserveMessage(mqtt.Message{Topic: "ota/devices/ghost000000/status", Payload: []byte(`{"device":"ghost000000","seq":1,"state":"idle"}`)})
	v.ObserveMessage(mqtt.Message{Topic: "ota/devices/ghost016390/status", Payload: []byte(`{"device":"ghost016390","seq":1,"state":"idle"}`)})
	if d, _, _ := v.Device("ghost000000"); d.Online != nil {
		t.Errorf("the first presence heard was kept past the bound: %v", *d.Online)
	}
	if d, _, _ := v.Device("ghost016390"); d.Online == nil || !*d.Online {
		t.Errorf("the last presence heard was dropped")
	}
	v.ObserveMessage(mqtt.Message{Topic: "ota/devices/gw-1/online", Payload: []byte(`{"online":false}`), Retained: true})
	v.ObserveMessage(mqtt.Message{Topic: "ota/devices/gw-1/status", Payload: []byte(`{"device":"gw-1","seq":1,"state":"idle"}`), Retained: true})
	if d, _, ok := v.Device("gw-1"); !ok || d.Online == nil || *d.Online {
		t.Errorf("gw-1: %+v, want offline", d)
	}
}
