package daemon_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/otad/otad/internal/testkit/brokertest"
	"github.com/otad/otad/internal/testkit/devicetest"
	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/internal/testkit/rabbitmqtest"
	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/operator"
	"github.com/otad/otad/ota"
)

// seen is one message as the cloud saw it.
type seen struct {
	topic    string
	payload  []byte
	retained bool
	at       time.Time
}

// cloud follows the device's status and presence with a persistent session
// (QoS 1): what the device publishes while the cloud's connection is down,
// over a broker restart, is queued for it.
type cloud struct {
	mu   sync.Mutex
	msgs []seen
}

func follow(t *testing.T, broker string) *cloud {
	t.Helper()
	c := &cloud{}
	filters := map[string]byte{"ota/devices/" + devID + "/status": 1, "ota/devices/" + devID + "/online": 1}
	mosquittotest.Client(t, broker, fmt.Sprint("cloud-", rand.Int64()), func(o *paho.ClientOptions) {
		o.SetCleanSession(false).SetMaxReconnectInterval(time.Second).
			SetDefaultPublishHandler(func(_ paho.Client, m paho.Message) {
				c.mu.Lock()
				c.msgs = append(c.msgs, seen{m.Topic(), m.Payload(), m.Retained(), time.Now()})
				c.mu.Unlock()
			}).
			SetOnConnectHandler(func(pc paho.Client) { pc.SubscribeMultiple(filters, nil) })
	})
	return c
}

// wait waits for a message after since on the device's leaf topic that ok accepts.
func (c *cloud) wait(t *testing.T, what, leaf string, since time.Time, ok func(seen) bool) seen {
	t.Helper()
	topic := "ota/devices/" + devID + "/" + leaf
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		c.mu.Lock()
		for _, m := range c.msgs {
			if m.topic == topic && !m.at.Before(since) && ok(m) {
				c.mu.Unlock()
				return m
			}
		}
		c.mu.Unlock()
	}
	t.Fatalf("no %s on %s", what, topic)
	return seen{}
}

// quiet waits until nothing has arrived for d.
func (c *cloud) quiet(t *testing.T, d time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		c.mu.Lock()
		last := c.msgs[len(c.msgs)-1].at
		c.mu.Unlock()
		if time.Since(last) >= d {
			return
		}
	}
	t.Fatal("the device keeps publishing")
}

// status waits for a status the device published after since (not one the
// broker delivered again as retained) that ok accepts.
func (c *cloud) status(t *testing.T, what string, since time.Time, ok func(ota.Status) bool) ota.Status {
	t.Helper()
	var st ota.Status
	c.wait(t, what, "status", since, func(m seen) bool {
		st = ota.Status{}
		return !m.retained && json.Unmarshal(m.payload, &st) == nil && ok(st)
	})
	return st
}

func success(sum string) func(ota.Status) bool {
	return func(s ota.Status) bool {
		return s.State == ota.Idle && s.LastResult != nil && s.LastResult.Result == ota.ResultSuccess && s.Slots[s.BootedSlot].SHA256 == sum
	}
}

// fleetStatus runs `otactl status` and returns its table and its summary.
func fleetStatus(t *testing.T, broker, window string) (table, summary string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := operator.Run(t.Context(), []string{"status", "--broker", broker, "--window", window}, &stdout, &stderr); code != ota.ExitOK {
		t.Fatalf("otactl status: exit %d: %s", code, stderr.String())
	}
	return stdout.String(), stderr.String()
}

// The agent on every supported broker: a retained group offer and a device
// offer while running install to success, the will says offline when the
// network goes, the status is published again after a broker restart, and
// `otactl status` lists an idle device that published its status before it
// started (on RabbitMQ only through the report request).
func TestOnEveryBroker(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, k brokertest.Kind, b brokertest.Broker) {
		net := brokertest.NewProxy(t, b.Address())
		tb := devicetest.New(t, devicetest.Options{Broker: net.URL, Groups: []string{"canary"}})
		cloud := follow(t, b.Address())
		start := time.Now()
		runDevice(t, tb)
		cloud.status(t, "idle", start, func(s ota.Status) bool { return s.State == ota.Idle && s.BootedSlot == "A" })
		cloud.wait(t, "online", "online", start, func(m seen) bool { return string(m.payload) == `{"online":true}` })

		if rq, ok := b.(*rabbitmqtest.Broker); ok {
			// RabbitMQ: the persistent session is a durable queue that
			// expires 24 h after its client left (mqtt.subscription_ttl's
			// default): a retired device does not leave it forever.
			qs, err := rq.Queues()
			if err != nil {
				t.Fatal(err)
			}
			i := slices.IndexFunc(qs, func(q rabbitmqtest.Queue) bool { return q.Name == "mqtt-subscription-"+devID+"qos1" })
			if i < 0 || !qs[i].Durable || qs[i].Arguments["x-expires"] != float64(24*time.Hour/time.Millisecond) {
				t.Fatalf("the device's queue: %+v", qs)
			}
		}

		row := regexp.MustCompile(`(?m)^` + devID + `\s+yes\s+idle\s+\S+\s+A\s`) // RUNNING, then BOOTED
		table, summary := fleetStatus(t, b.Address(), "2s")
		if !row.MatchString(table) || !strings.HasPrefix(summary, "1 device (1 answered the report request within 2s") {
			t.Fatalf("otactl status:\n%s%s", table, summary)
		}
		// Broker behaviour: without a report request, only a broker that
		// delivers retained messages to wildcards shows the device.
		table, _ = fleetStatus(t, b.Address(), "0")
		if strings.Contains(table, devID) != k.RetainedToWildcards {
			t.Fatalf("otactl status --window 0 on %s (retained to wildcards: %v):\n%s", k.Name, k.RetainedToWildcards, table)
		}

		now := time.Now().UTC()
		group, groupSum := tb.Offer("v2", 2, devicetest.OfferOpts{Issued: now.Add(-2 * time.Minute)})
		publishRetained(t, b.Address(), "ota/groups/canary/desired", group)
		cloud.status(t, "the group offer's success", now, success(groupSum))
		now = time.Now().UTC()
		own, ownSum := tb.Offer("v3", 3, devicetest.OfferOpts{Issued: now.Add(-time.Minute)})
		publishRetained(t, b.Address(), "ota/devices/"+devID+"/desired", own)
		cloud.status(t, "the device offer's success", now, success(ownSum))

		cut := time.Now()
		net.Cut()
		cloud.wait(t, "the will", "online", cut, func(m seen) bool { return !m.retained && string(m.payload) == `{"online":false}` })
		cloud.wait(t, "online again", "online", cut, func(m seen) bool { return !m.retained && string(m.payload) == `{"online":true}` })

		// Cleared, the retained status comes back only if the device
		// publishes it again after the restart (the persistent session of
		// the cloud may be sent old messages again, so it cannot tell).
		// With no retained offer to take up again on reconnect either, and
		// once the device has done with those it took up after the cut.
		publishRetained(t, b.Address(), "ota/groups/canary/desired", nil)
		publishRetained(t, b.Address(), "ota/devices/"+devID+"/desired", nil)
		cloud.quiet(t, time.Second)
		publishRetained(t, b.Address(), "ota/devices/"+devID+"/status", nil)
		if st, ok := retainedStatus(t, b.Address()); ok {
			t.Fatalf("status retained after clearing it: %+v", st)
		}
		b.Restart()
		for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(500 * time.Millisecond) {
			if st, ok := retainedStatus(t, b.Address()); ok && success(ownSum)(st) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("no status retained after the broker restart: the device did not publish it again")
			}
		}
	})
}

// retainedStatus is the device's retained status on the broker, if any.
func retainedStatus(t *testing.T, broker string) (ota.Status, bool) {
	t.Helper()
	var (
		mu  sync.Mutex
		got []byte
	)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s, err := mqtt.Open(ctx, mqtt.Config{Broker: broker}, map[string]byte{"ota/devices/" + devID + "/status": 1}, func(m mqtt.Message) {
		mu.Lock()
		got = m.Payload
		mu.Unlock()
	})
	if err != nil {
		return ota.Status{}, false // the broker is still starting
	}
	defer s.Close()
	if err := s.Sync(ctx); err != nil {
		return ota.Status{}, false
	}
	mu.Lock()
	defer mu.Unlock()
	var st ota.Status
	return st, len(got) > 0 && json.Unmarshal(got, &st) == nil
}

func publishRetained(t *testing.T, broker, topic string, payload []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := mqtt.PublishRetained(ctx, mqtt.Config{Broker: broker}, topic, payload); err != nil {
		t.Fatal(err)
	}
}
