package operator

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/otad/otad/internal/testkit/brokertest"
	"github.com/otad/otad/internal/testkit/fakefleet"
)

// 3,000 devices' retained statuses on a stock Mosquitto (which queues at most
// ~1,000 retained messages for a QoS 1 wildcard subscription) and on RabbitMQ
// (which delivers none to a wildcard), and simulated agents answering the
// report request: otactl status shows every device the broker lets it see,
// and says how many it has and when the view may be incomplete.
func TestStatusAtFleetScale(t *testing.T) {
	if testing.Short() {
		t.Skip("3,000 devices")
	}
	ids := fakefleet.IDs(3000)
	brokertest.Each(t, func(t *testing.T, k brokertest.Kind, b brokertest.Broker) {
		fakefleet.Connect(t, b.Address(), "").Publish(ids)
		answering := 0
		for _, online := range []int{2000, 3000} {
			// ids[:online] answer (as agents do), the others are offline.
			fakefleet.Connect(t, b.Address(), "").Answer(ids[answering:online])
			answering = online
			shown := ids
			summary := fmt.Sprintf("3000 devices (%d answered the report request within 5s, %d from retained only)", online, 3000-online)
			if !k.RetainedToWildcards { // broker behaviour: only the devices that answer are seen, and it says so
				shown = ids[:online]
				summary = fmt.Sprintf("%d devices (%d answered the report request within 5s, 0 from retained only); "+
					"the view may be incomplete: retained delivery missed %d of the %d devices that answered, "+
					"so devices that did not answer (offline now) may be missing", online, online, online, online)
			}
			t.Run(fmt.Sprintf("%d online", online), func(t *testing.T) {
				r := mustRun(t, "status", "--broker", b.Address(), "--window", "5s")
				if r.stderr != summary+"\n" {
					t.Errorf("summary %q\nwant    %q", r.stderr, summary+"\n")
				}
				var rows []string
				for _, l := range strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")[1:] {
					rows = append(rows, strings.Fields(l)[0])
				}
				if !slices.Equal(rows, shown) {
					t.Fatalf("%d devices shown, want %d", len(rows), len(shown))
				}
			})
		}
	})
}
