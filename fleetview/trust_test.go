package fleetview

import (
	"bytes"
	"encoding/json"
	"fmt"
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
