package fleetview

import (
	"fmt"
	"testing"
)

// bigFleet is a view of n idle devices over 20 versions.
func bigFleet(b *testing.B, n int) *View {
	b.Helper()
	v := New("ota")
	for i := range n {
		id := fmt.Sprintf("gw-%06d", i)
		v.Observe("ota/devices/"+id+"/status", []byte(statusOf(id, "eu", fmt.Sprintf("1.%d", i%20), nil)))
	}
	return v
}

// One page of the dashboard's table at 100,000 devices, against the
// whole-fleet walks it replaces: the table as `otactl status` renders it,
// and every device's row built.
func BenchmarkFleet100k(b *testing.B) {
	v := bigFleet(b, 100_000)
	v.Query(Filter{}, 0, 1) // the ID order, built once
	b.Run("page of 50", func(b *testing.B) {
		for b.Loop() {
			v.Query(Filter{}, 50_000, 50)
		}
	})
	b.Run("page of 50, searched", func(b *testing.B) {
		for b.Loop() {
			v.Query(Filter{Search: "1.7", State: "idle"}, 0, 50)
		}
	})
	b.Run("summary", func(b *testing.B) {
		for b.Loop() {
			v.Summary(Filter{})
		}
	})
	b.Run("every row", func(b *testing.B) {
		for b.Loop() {
			v.Query(Filter{}, 0, 0)
		}
	})
}
