package main

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// Issue 11: one group offer is one offer per device, so every device
// downloads the image exactly once; anything else fails the row and the run.
func TestPrintFleetDownloads(t *testing.T) {
	notConverged := errors.New("devices with success: 3 of 4 after 1s")
	tests := []struct {
		name      string
		r         fleetResult
		ok        bool
		row, note string // the row's result column and the line under the table; "" for none
	}{
		{"each once", fleetResult{N: 4, Succeeded: 4, Downloads: [2]int{1, 1}}, true, "ok", ""},
		{"one twice", fleetResult{N: 4, Succeeded: 4, Downloads: [2]int{1, 2}}, false, "FAIL", "N=4 FAIL: downloads per device 1-2, want exactly 1"},
		{"all twice", fleetResult{N: 4, Succeeded: 4, Downloads: [2]int{2, 2}}, false, "FAIL", "N=4 FAIL: downloads per device 2, want exactly 1"},
		{"one never", fleetResult{N: 4, Succeeded: 4, Downloads: [2]int{0, 1}}, false, "FAIL", "N=4 FAIL: downloads per device 0-1, want exactly 1"},
		{"not converged, none twice", fleetResult{N: 4, Succeeded: 3, Downloads: [2]int{0, 1}, Err: notConverged}, true, "FAILED 3/4", ""},
		{"not converged, one twice", fleetResult{N: 4, Succeeded: 3, Downloads: [2]int{0, 2}, Err: notConverged}, false, "FAIL", "N=4 FAIL: downloads per device 0-2, want exactly 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			if ok := printFleet(&out, []fleetResult{tc.r}, time.Second); ok != tc.ok {
				t.Errorf("printFleet = %v, want %v", ok, tc.ok)
			}
			lines := strings.Split(out.String(), "\n")
			if len(lines) < 3 {
				t.Fatalf("no table:\n%s", out.String())
			}
			if res := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(lines[2]), "4 ")); !strings.HasPrefix(res, tc.row+"  ") {
				t.Errorf("row %q: want result %q", lines[2], tc.row)
			}
			if got := strings.Contains(out.String(), "FAIL: downloads"); got != (tc.note != "") || !strings.Contains(out.String(), tc.note) {
				t.Errorf("want note %q:\n%s", tc.note, out.String())
			}
		})
	}
}
