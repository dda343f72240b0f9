package operator

import (
	"bufio"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/otad/otad/internal/testkit/brokertest"
	"github.com/otad/otad/internal/testkit/fakefleet"
	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/ota"
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
					"offline devices may be missing: the broker did not deliver the saved status of %d of the %d devices that answered, "+
					"so it may not have delivered those of devices that are offline now", online, online, online, online)
			}
			t.Run(fmt.Sprintf("%d online", online), func(t *testing.T) {
				args := []string{"status", "--broker", b.Address(), "--window", "5s"}
				if !k.RetainedToWildcards {
					args = append(args, "--broker-queue", "0") // RabbitMQ queues without a limit (docs/brokers.md)
				}
				r := mustRun(t, args...)
				if r.stderr != summary+"\n" {
					t.Errorf("summary %q\nwant    %q", r.stderr, summary+"\n")
				}
				var rows []string
				table, _, _ := strings.Cut(r.stdout, "\n\n") // the totals follow
				for _, l := range strings.Split(table, "\n")[1:] {
					rows = append(rows, strings.Fields(l)[0])
				}
				if !slices.Equal(rows, shown) {
					t.Fatalf("%d devices shown, want %d", len(rows), len(shown))
				}
			})
		}
	})
}

// --summary on 10,000 devices prints the totals alone: what a fleet that
// size needs instead of a table.
func TestStatusSummaryAt10000Devices(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 devices")
	}
	b := mosquittotest.Start(t, mosquittotest.Options{Quiet: true})
	fakefleet.Connect(t, b.URL, "").Publish(fakefleet.IDs(10000))
	r := mustRun(t, "status", "--broker", b.URL, "--summary", "--window", "0", "--timeout", "5s")
	if want := "10000 devices\nstate:    10000 idle\nrunning:  10000 1.0.0\nonline:   10000 unknown\n"; r.stdout != want {
		t.Errorf("--summary printed:\n%.2000s\nwant:\n%s", r.stdout, want)
	}
}

// status --json on a 1,000-device simulated fleet (real agents) after a
// group release: every device, a JSON object a line, with the version it
// runs and the slot it runs it from.
func TestStatusJSONOnASimulatedFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 agents")
	}
	const n = 1000
	r := startFleetRun(t, n, 0)
	r.waitUp(t)
	mustRun(t, "publish", "--broker", r.urls[0], "--group", "fleet", r.offer)
	waitFleet(t, fleetStatuses(t, r.urls[0]), "every device on 2.0", r.ids(), func(st ota.Status) bool {
		return st.State == ota.Idle && st.Slots[st.BootedSlot].Version == "2.0"
	})
	res := mustRun(t, "status", "--broker", r.urls[0], "--json", "--window", "3s")
	seen := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(res.stdout))
	for sc.Scan() {
		var d struct {
			Device, Running, Booted, State string
		}
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		if d.Running != "2.0" || d.Booted != "B" || d.State != "idle" || seen[d.Device] {
			t.Errorf("%+v (seen before: %v)", d, seen[d.Device])
		}
		seen[d.Device] = true
	}
	if len(seen) != n {
		t.Errorf("%d devices in --json, want %d; stderr: %s", len(seen), n, res.stderr)
	}
	for _, id := range r.ids() {
		if !seen[id] {
			t.Errorf("%s missing", id)
		}
	}
}
