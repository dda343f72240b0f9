package fleetview

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
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
