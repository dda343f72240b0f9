package rabbitmqtest

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/otad/otad/internal/testkit/mosquittotest"
)

type message struct {
	topic    string
	retained bool
}

// client connects a paho client; persistent (clean session off) when id is set.
func client(t *testing.T, b *Broker, id string, filters map[string]byte) (paho.Client, <-chan message) {
	t.Helper()
	ch := make(chan message, 16)
	clientID := id
	if id == "" {
		clientID = fmt.Sprint("t-", rand.Int64())
	}
	c := mosquittotest.Client(t, b.URL, clientID, func(o *paho.ClientOptions) {
		o.SetCleanSession(id == "").
			SetDefaultPublishHandler(func(_ paho.Client, m paho.Message) { ch <- message{m.Topic(), m.Retained()} })
	})
	if len(filters) > 0 {
		wait(t, c.SubscribeMultiple(filters, nil))
	}
	return c, ch
}

func wait(t *testing.T, tok paho.Token) {
	t.Helper()
	if !tok.WaitTimeout(20*time.Second) || tok.Error() != nil {
		t.Fatalf("mqtt: %v", tok.Error())
	}
}

func next(t *testing.T, ch <-chan message, d time.Duration) (message, bool) {
	t.Helper()
	select {
	case m := <-ch:
		return m, true
	case <-time.After(d):
		return message{}, false
	}
}

// The RabbitMQ behaviours docs/brokers.md relies on, on the node this kit
// runs: retained messages go to exact-topic subscriptions only, '/' maps to
// '.', a persistent client's queue expires (mqtt.subscription_ttl), and a
// restart keeps retained messages.
func TestRabbitMQBehaviour(t *testing.T) {
	b := Start(t, Options{SubscriptionTTL: 3 * time.Second})
	pub, _ := client(t, b, "", nil)
	defer pub.Disconnect(100)
	wait(t, pub.Publish("ota/devices/d1/status", 1, true, "idle"))

	_, exact := client(t, b, "", map[string]byte{"ota/devices/d1/status": 1})
	if m, ok := next(t, exact, 5*time.Second); !ok || !m.retained {
		t.Fatalf("exact-topic subscription: %+v %v, want the retained message", m, ok)
	}
	_, wild := client(t, b, "", map[string]byte{"ota/devices/+/status": 1})
	if m, ok := next(t, wild, 2*time.Second); ok {
		t.Fatalf("wildcard subscription got %+v: RabbitMQ delivers retained messages only to exact topics", m)
	}

	_, dotted := client(t, b, "", map[string]byte{"ota/devices/gw.1/desired": 1})
	wait(t, pub.Publish("ota/devices/gw.1/desired", 1, false, "offer"))
	if m, ok := next(t, dotted, 5*time.Second); !ok || m.topic != "ota/devices/gw/1/desired" {
		t.Fatalf("dotted topic arrived as %+v %v, want ota/devices/gw/1/desired", m, ok)
	}

	dev, _ := client(t, b, "gw-retired", map[string]byte{"ota/devices/gw-retired/desired": 1, "ota/fleet/report": 0})
	if q := queue(t, b, "mqtt-subscription-gw-retiredqos1"); q == nil || !q.Durable || q.Arguments["x-expires"] != float64(3000) {
		t.Fatalf("persistent session's QoS 1 queue %+v, want it durable with x-expires 3000", q)
	}
	if q := queue(t, b, "mqtt-subscription-gw-retiredqos0"); q == nil || q.Durable {
		t.Fatalf("persistent session's QoS 0 queue %+v, want it transient", q)
	}
	dev.Disconnect(100) // retired: never comes back
	for _, name := range []string{"mqtt-subscription-gw-retiredqos1", "mqtt-subscription-gw-retiredqos0"} {
		for deadline := time.Now().Add(30 * time.Second); queue(t, b, name) != nil; time.Sleep(500 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s still there 30 s after its client left", name)
			}
		}
	}

	b.Restart()
	_, exact = client(t, b, "", map[string]byte{"ota/devices/d1/status": 1})
	if m, ok := next(t, exact, 5*time.Second); !ok || !m.retained {
		t.Fatalf("after a restart: %+v %v, want the retained message", m, ok)
	}
}

func queue(t *testing.T, b *Broker, name string) *Queue {
	t.Helper()
	qs, err := b.Queues()
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if q.Name == name {
			return &q
		}
	}
	return nil
}
