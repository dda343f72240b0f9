package otactl

import (
	"slices"
	"strings"
	"testing"

	"github.com/otad/otad/internal/testkit/fakefleet"
	"github.com/otad/otad/internal/testkit/mosquittotest"
)

// 3,000 devices' retained statuses on a stock Mosquitto (which queues at most
// ~1,000 retained messages for a QoS 1 wildcard subscription), and simulated
// agents answering the report request: otactl status shows every device and
// says how each was heard of.
func TestStatusAtFleetScale(t *testing.T) {
	if testing.Short() {
		t.Skip("3,000 devices")
	}
	b := mosquittotest.Start(t, mosquittotest.Options{Quiet: true})
	ids := fakefleet.IDs(3000)
	fakefleet.Connect(t, b.URL, "").Publish(ids)
	for _, tt := range []struct {
		name      string
		answering []string // the online devices, added to those of the cases before
		summary   string
	}{
		{"a third offline", ids[:2000], "3000 devices (2000 answered the report request within 5s, 1000 from retained only)\n"},
		{"all online", ids[2000:], "3000 devices (3000 answered the report request within 5s, 0 from retained only)\n"},
	} {
		fakefleet.Connect(t, b.URL, "").Answer(tt.answering) // stays for the next case
		t.Run(tt.name, func(t *testing.T) {
			r := mustRun(t, "status", "--broker", b.URL, "--window", "5s")
			if r.stderr != tt.summary {
				t.Errorf("summary %q, want %q", r.stderr, tt.summary)
			}
			lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")[1:]
			var shown []string
			for _, l := range lines {
				shown = append(shown, strings.Fields(l)[0])
			}
			if !slices.Equal(shown, ids) {
				t.Fatalf("%d devices shown, want all %d", len(shown), len(ids))
			}
		})
	}
}
