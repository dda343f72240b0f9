package controller

import (
	"testing"

	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/rollout"
)

func FuzzTrackerMessage(f *testing.F) {
	f.Add([]byte(`{"device":"d1","seq":3,"boot_id":"b","groups":["g"],"last_result":{"id":"rel-2","result":"success"}}`))
	f.Add([]byte(`{"device":"d1","target":{"id":"rel-2"},"pending":null,"last_refusal":{"id":"rel-2","code":"stale"}}`))
	f.Add([]byte(`{"device":"d1","seq":-1}`))
	p := testPlan(5, 1, rollout.Wave{Percent: 100})
	f.Fuzz(func(t *testing.T, b []byte) {
		tr := NewTracker(p, "ota", nil)
		tr.Message(mqtt.Message{Topic: "ota/devices/d1/status", Payload: b})
		if n := tr.Len(); n > 1 {
			t.Fatalf("%d devices from one status", n)
		}
		tr.Fleet(NewObserver(tr, 0, nil))(func(v rollout.View) {
			v.Devices.Each(func(id string, d rollout.Device) {
				if id != "d1" || d.Place != rollout.PlaceOf(p.Name, "d1") {
					t.Fatalf("device %q %+v", id, d)
				}
			})
		})
	})
}
