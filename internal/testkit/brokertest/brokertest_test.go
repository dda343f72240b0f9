package brokertest

import (
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/otad/otad/internal/testkit/fakefleet"
	"github.com/otad/otad/internal/testkit/mosquittotest"
)

// The retained deliveries docs/brokers.md states and the fleet view is built
// around, on each broker: with 3,000 retained statuses, a wildcard
// subscription gets them all at QoS 0 but at most Mosquitto's queue limit
// (max_queued_messages + max_inflight_messages: 1,020) at QoS 1, and none on
// RabbitMQ; an exact-topic subscription gets its one everywhere.
func TestRetainedDelivery(t *testing.T) {
	const n = 3000
	Each(t, func(t *testing.T, k Kind, b Broker) {
		fakefleet.Connect(t, b.Address(), "").Publish(fakefleet.IDs(n))
		count := func(filter string, qos byte) int {
			var got atomic.Int64
			c := mosquittotest.Client(t, b.Address(), fmt.Sprint("count-", rand.Int64()))
			if tok := c.Subscribe(filter, qos, func(paho.Client, paho.Message) { got.Add(1) }); !tok.WaitTimeout(20*time.Second) || tok.Error() != nil {
				t.Fatalf("subscribe %s: %v", filter, tok.Error())
			}
			for last := int64(-1); last != got.Load(); time.Sleep(time.Second) { // until a second passes without one
				last = got.Load()
			}
			c.Disconnect(100)
			return int(got.Load())
		}
		qos0, qos1 := count("ota/devices/+/status", 0), count("ota/devices/+/status", 1)
		exact := count("ota/devices/gw-01234/status", 1)
		t.Logf("%s: wildcard QoS 0 %d, QoS 1 %d of %d retained; exact topic %d", k.Name, qos0, qos1, n, exact)
		switch {
		case exact != 1:
			t.Errorf("exact-topic subscription got %d retained messages, want 1", exact)
		case !k.RetainedToWildcards && (qos0 != 0 || qos1 != 0):
			t.Errorf("%s delivered retained messages to a wildcard subscription", k.Name)
		case k.RetainedToWildcards && (qos0 != n || qos1 >= n):
			t.Errorf("%s: want all %d at QoS 0 and fewer at QoS 1 (its queue limit)", k.Name, n)
		}
	})
}
