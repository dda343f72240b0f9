// Package fakefleet stands in for many devices on a real broker, for tests of
// the cloud side at fleet scale: their retained statuses, published as plain
// messages, and their answers to report requests, all from one MQTT client.
// It is not an agent: the agent's own answering is tested in mqtt and, on
// every supported broker, in device/daemon.
package fakefleet

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/ota"
)

// IDs names n devices: gw-00000, gw-00001, …
func IDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("gw-%05d", i)
	}
	return ids
}

// Status is an idle device's status snapshot.
func Status(id string) []byte {
	b, _ := json.Marshal(ota.Status{Device: id, Seq: 1, BootID: "fake", State: ota.Idle, BootedSlot: ota.SlotA,
		Slots: map[ota.Slot]ota.SlotStatus{ota.SlotA: {Version: "1.0.0", Status: ota.SlotGood}}})
	return b
}

// Fleet is one client speaking for many devices.
type Fleet struct {
	t        testing.TB
	c        paho.Client
	topics   mqtt.Topics
	Answered atomic.Int64 // answers published
}

// Connect connects a client for the fleet under prefix ("" is "ota") to any
// broker and disconnects it at the end of the test.
func Connect(t testing.TB, broker, prefix string) *Fleet {
	t.Helper()
	c := mosquittotest.Client(t, broker, fmt.Sprintf("fakefleet-%d", rand.Int64()))
	return &Fleet{t: t, c: c, topics: mqtt.Topics{Prefix: prefix}}
}

func (f *Fleet) wait(what string, tok paho.Token) {
	f.t.Helper()
	if !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
		f.t.Fatalf("fakefleet %s: %v", what, tok.Error())
	}
}

func (f *Fleet) statusTopic(id string) string {
	t := f.topics
	t.Device = id
	return t.Status()
}

// Publish publishes the devices' statuses retained (QoS 1) and waits for the
// broker to take them all.
func (f *Fleet) Publish(ids []string) {
	f.t.Helper()
	toks := make([]paho.Token, len(ids))
	for i, id := range ids {
		toks[i] = f.c.Publish(f.statusTopic(id), 1, true, Status(id))
	}
	for i, tok := range toks {
		f.wait("publish "+ids[i], tok)
	}
}

// Answer makes the devices answer report requests to the whole fleet as
// agents do: each publishes its status again, retained, at a random time
// within the request's window.
func (f *Fleet) Answer(ids []string) {
	f.t.Helper()
	f.wait("subscribe", f.c.Subscribe(f.topics.FleetReport(), 0, func(_ paho.Client, m paho.Message) {
		r, err := mqtt.ParseReportRequest(m.Payload())
		if err != nil || m.Retained() {
			return
		}
		for _, id := range ids {
			time.AfterFunc(rand.N(r.Window()), func() {
				f.c.Publish(f.statusTopic(id), 1, true, Status(id))
				f.Answered.Add(1)
			})
		}
	}))
}
