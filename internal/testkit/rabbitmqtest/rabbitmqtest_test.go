package rabbitmqtest

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
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

// redial connects a persistent client as client does, dialling again for
// up to within while the broker refuses or does not answer.
func redial(t *testing.T, b *Broker, id string, filters map[string]byte, within time.Duration) (paho.Client, <-chan message) {
	t.Helper()
	ch := make(chan message, 16)
	var last error
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		opts := paho.NewClientOptions().AddBroker(strings.Replace(b.URL, "mqtt://", "tcp://", 1)).
			SetClientID(id).SetCleanSession(false).SetConnectTimeout(10 * time.Second).
			SetDefaultPublishHandler(func(_ paho.Client, m paho.Message) { ch <- message{m.Topic(), m.Retained()} })
		c := paho.NewClient(opts)
		tok := c.Connect()
		if !tok.WaitTimeout(15 * time.Second) {
			last = fmt.Errorf("no CONNACK in 15 s")
			c.Disconnect(0)
			continue
		}
		if last = tok.Error(); last != nil {
			continue
		}
		t.Cleanup(func() { c.Disconnect(100) })
		wait(t, c.SubscribeMultiple(filters, nil))
		return c, ch
	}
	t.Fatalf("MQTT client %s on %s: not connected in %v: %v", id, b.URL, within, last)
	return nil, nil
}

// steps names the test's steps as it goes; if the test fails, the last
// one named is said again at its very end, after the nodes' logs (a
// failure's own line is otherwise buried under them).
func steps(t *testing.T) func(string) {
	var now string
	t.Cleanup(func() { // registered first, so it runs last
		if t.Failed() {
			t.Logf("%s failed while testing: %s", t.Name(), now)
		}
	})
	return func(s string) { now = s }
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
	if m, ok := next(t, exact, 20*time.Second); !ok || !m.retained {
		t.Fatalf("exact-topic subscription: %+v %v, want the retained message", m, ok)
	}
	_, wild := client(t, b, "", map[string]byte{"ota/devices/+/status": 1})
	if m, ok := next(t, wild, 2*time.Second); ok {
		t.Fatalf("wildcard subscription got %+v: RabbitMQ delivers retained messages only to exact topics", m)
	}

	_, dotted := client(t, b, "", map[string]byte{"ota/devices/gw.1/desired": 1})
	wait(t, pub.Publish("ota/devices/gw.1/desired", 1, false, "offer"))
	if m, ok := next(t, dotted, 20*time.Second); !ok || m.topic != "ota/devices/gw/1/desired" {
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
	if m, ok := next(t, exact, 20*time.Second); !ok || !m.retained {
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

// What docs/brokers.md says of a RabbitMQ cluster, on the cluster this kit
// runs: three nodes form one cluster; live messages cross nodes, retained
// ones do not (each node keeps its own); one client ID is one connection
// across the cluster (the later takes over); and with the session queues
// mirrored, a persistent client whose node is lost resumes its session on
// another node, queued messages included.
func TestCluster(t *testing.T) {
	step := steps(t)
	step("starting a cluster of 3 nodes")
	c := StartCluster(t, 3, Options{})
	if out, err := c.Running(0); err != nil || strings.Count(out, "otadtest-") != 3 {
		t.Fatalf("running nodes: %v %s", err, out)
	}
	b0, b1, b2 := c.Nodes[0], c.Nodes[1], c.Nodes[2]
	pub, _ := client(t, b0, "", nil)
	defer pub.Disconnect(100)

	step("a retained message, on another node")
	wait(t, pub.Publish("ota/devices/d1/status", 1, true, "retained on node 0"))
	_, elsewhere := client(t, b1, "", map[string]byte{"ota/devices/d1/status": 1})
	if m, ok := next(t, elsewhere, 2*time.Second); ok {
		t.Fatalf("node 1 delivered %+v: RabbitMQ keeps retained messages per node", m)
	}
	step("a live message, on another node")
	wait(t, pub.Publish("ota/devices/d1/status", 1, false, "live"))
	if m, ok := next(t, elsewhere, 20*time.Second); !ok || m.retained {
		t.Fatalf("a live message from node 0 on node 1: %+v %v", m, ok)
	}

	// A persistent device on node 1, away while an offer is queued for it.
	step("a persistent session, resumed on node 2 after node 1 is lost")
	dev, _ := client(t, b1, "gw-9", map[string]byte{"ota/devices/gw-9/desired": 1})
	dev.Disconnect(100)
	wait(t, pub.Publish("ota/devices/gw-9/desired", 1, false, "queued offer"))
	b1.Kill()
	// As a device does, it dials again until the cluster has taken the
	// loss in (its client ID registry elects a new leader first: seconds,
	// more on a loaded machine).
	_, back := redial(t, b2, "gw-9", map[string]byte{"ota/devices/gw-9/desired": 1}, time.Minute)
	if m, ok := next(t, back, 30*time.Second); !ok || m.topic != "ota/devices/gw-9/desired" {
		t.Fatalf("the device's session on node 2 after node 1 was lost: %+v %v", m, ok)
	}

	// One client ID, two nodes: the later connection takes over.
	step("one client ID on two nodes")
	lost := make(chan struct{}, 1)
	mosquittotest.Client(t, b0.URL, "ctl-1", func(o *paho.ClientOptions) {
		o.SetAutoReconnect(false).SetConnectionLostHandler(func(paho.Client, error) { lost <- struct{}{} })
	})
	mosquittotest.Client(t, b2.URL, "ctl-1")
	select {
	case <-lost:
	case <-time.After(30 * time.Second):
		t.Fatal("a second connection with the same client ID on another node did not take over")
	}
	if i := c.NodeWithin("ctl-1", 20*time.Second, func(i int) bool { return i == 2 }); i != 2 {
		t.Errorf("ctl-1 on node %d, want 2", i)
	}
}

func TestParseMembers(t *testing.T) {
	for _, tc := range []struct {
		out  string
		want []string
		err  bool
	}{
		{"{ok,[{mqtt_node,'a@localhost'},\n {mqtt_node,'b@localhost'}],\n {mqtt_node,'b@localhost'}}\n", []string{"a@localhost", "b@localhost"}, false},
		{"{ok,[],{mqtt_node,'a@localhost'}}", nil, false},
		{"{timeout,{mqtt_node,'a@localhost'}}", nil, true},
		{"{error,noproc}", nil, true},
	} {
		got, err := parseMembers(tc.out)
		if (err != nil) != tc.err || !slices.Equal(got, tc.want) {
			t.Errorf("parseMembers(%q) = %q, %v; want %q (error %v)", tc.out, got, err, tc.want, tc.err)
		}
	}
}
