package fleetview

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/otad/otad/ota"
)

// TestSummaryByTrustVersion: the totals say which devices took a rotation
// of the root of trust; a fleet without roots gets no trust line.
func TestSummaryByTrustVersion(t *testing.T) {
	v := New("ota")
	for i, tv := range []uint64{3, 3, 2, 0} {
		id := fmt.Sprintf("gw-%d", i)
		b, _ := json.Marshal(ota.Status{Device: id, State: ota.Idle, BootedSlot: "A", TrustVersion: tv,
			Slots: map[ota.Slot]ota.SlotStatus{"A": {Version: "1.0"}}})
		v.Observe("ota/devices/"+id+"/status", b)
	}
	s := v.Summary(Filter{})
	if s.Trust["v3"] != 2 || s.Trust["v2"] != 1 || s.Trust[""] != 1 {
		t.Fatalf("trust totals %v", s.Trust)
	}
	// Filter.Trust picks the devices of one version, as the totals name it;
	// each row carries its version.
	for key, want := range map[string][]string{"v3": {"gw-0", "gw-1"}, "v2": {"gw-2"}, "v9": nil} {
		var got []string
		for _, d := range v.Query(Filter{Trust: key}, 0, 10).Devices {
			if TrustKey(d.TrustVersion) != key {
				t.Errorf("%s: trust_version %d in the %s devices", d.ID, d.TrustVersion, key)
			}
			got = append(got, d.ID)
		}
		if !slices.Equal(got, want) {
			t.Errorf("Filter{Trust: %q}: %v, want %v", key, got, want)
		}
	}
	var buf bytes.Buffer
	s.Write(&buf)
	if want := "trust:    2 v3, 1 -, 1 v2\n"; !bytes.HasSuffix(buf.Bytes(), []byte(want)) {
		t.Errorf("summary:\n%s\nwant it to end with %q", buf.String(), want)
	}
	buf.Reset()
	testFleet(t).Summary(Filter{}).Write(&buf)
	if bytes.Contains(buf.Bytes(), []byte("trust:")) {
		t.Errorf("a fleet without roots shows a trust line:\n%s", buf.String())
	}
}
