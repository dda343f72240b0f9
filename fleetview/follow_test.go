package fleetview

import (
	"context"
	"testing"
	"time"

	"github.com/otad/otad/internal/testkit/brokertest"
	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/ota"
)

// A view whose connection drops misses what devices publish meanwhile, and
// RabbitMQ does not deliver it as retained when the view subscribes again: the
// view asks the devices to report again after each reconnect (on Mosquitto
// the retained status alone would do: broker behaviour). The device here is
// a real agent's connection (mqtt.Conn) answering for itself.
func TestFollowAsksAgainAfterReconnect(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, k brokertest.Kind, b brokertest.Broker) {
		net := brokertest.NewProxy(t, b.Address())
		v := New("")
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		sess, err := v.Follow(ctx, mqtt.Config{Broker: net.URL}, FollowOptions{Window: time.Second, Group: "eu"})
		if err != nil {
			t.Fatal(err)
		}
		defer sess.Close()

		// The view first: a device publishes its status as it connects,
		// before its subscriptions are made, so a request sent in between
		// would go unanswered, and RabbitMQ delivers no retained status to
		// a wildcard; this status arrives live.
		dev, err := mqtt.Dial(mqtt.Config{Broker: b.Address(), DeviceID: "gw-1", Groups: []string{"eu"},
			Reconnect: mqtt.Backoff{First: 200 * time.Millisecond}}, func(string, []byte) {})
		if err != nil {
			t.Fatal(err)
		}
		defer dev.Close(context.Background())
		dev.PublishStatus(member("gw-1", 1, "eu"))
		waitSeq(t, v, 1)

		net.Down()
		dev.PublishStatus(member("gw-1", 2, "eu")) // while the view is away
		time.Sleep(500 * time.Millisecond)
		net.Up()
		waitSeq(t, v, 2)
	})
}

func waitSeq(t *testing.T, v *View, seq uint64) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st, ok := v.Status("gw-1")
		if ok && st.Seq == seq && st.State == ota.Idle {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the view has %+v (%v), want seq %d", st, ok, seq)
		}
	}
}
