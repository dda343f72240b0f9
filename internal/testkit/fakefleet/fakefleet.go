// Package fakefleet stands in for many devices on a real broker, for tests of
// the cloud side at fleet scale: their retained statuses, published as plain
// messages, their answers to report requests, and, when asked, their answer
// to an offer (a status naming its outcome), all from a few MQTT clients.
// It is not an agent: the agent's own answering is tested in mqtt and, on
// every supported broker, in device/daemon.
package fakefleet

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/verify"
)

// BrokerLines are the mosquitto.conf lines of bench/rollout's tuned rows
// (-tuned-from): no per-client queue limit, so the controller may offer a
// wave unpaced (--broker-queue 0) and be sent every answer at once. Tests
// and the other rows run the broker at its stock limits (docs/brokers.md).
func BrokerLines() []string { return []string{"max_queued_messages 0"} }

// IDs names n devices: gw-00000, gw-00001, …
func IDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("gw-%05d", i)
	}
	return ids
}

// Status is an idle device's status snapshot, in groups.
func Status(id string, groups ...string) []byte {
	return encode(ota.Status{Device: id, Seq: 1, BootID: "fake", State: ota.Idle, BootedSlot: ota.SlotA, Groups: groups,
		Slots: map[ota.Slot]ota.SlotStatus{ota.SlotA: {Version: "1.0.0", Status: ota.SlotGood}}})
}

func encode(st ota.Status) []byte {
	b, _ := json.Marshal(st)
	return b
}

// Fleet is a few clients speaking for many devices.
type Fleet struct {
	fatal    func(error)         // t.Fatal in a test
	c        paho.Client         // subscribes (report requests, offers)
	cs       []paho.Client       // publish, each a share of the devices
	senders  []*sender           // one per client in cs, for the answers
	done     chan struct{}       // stops the senders
	broker   string              // for the offer shards' connections (TakeOffersOf)
	shards   []paho.Client       // TakeOffersOf's connections
	subs     []func(paho.Client) // the first client's subscriptions, made again on a reconnect
	topics   mqtt.Topics
	Groups   []string     // the groups every device's status lists
	Answered atomic.Int64 // answers to report requests published
	Offered  atomic.Int64 // offers received (and answered)

	mu       sync.Mutex
	outcome  map[string]*ota.Outcome // a device's answer to the offer it took last
	offers   map[string]int          // offers received per device
	answered map[string]bool         // device and manifest ID: answered
	arrived  []time.Time             // when each offer arrived
}

// Connect connects a client for the fleet under prefix ("" is "ota") to any
// broker and disconnects it at the end of the test; it subscribes again
// when paho reconnects it (Dial).
func Connect(t testing.TB, broker, prefix string) *Fleet {
	t.Helper()
	var fleet atomic.Pointer[Fleet]
	c, err := dial(broker, func(c paho.Client) { subscribeAgain(&fleet, c) })
	if err != nil {
		t.Fatal(err)
	}
	f := newFleet(c, prefix, func(err error) { t.Helper(); t.Fatal(err) })
	f.broker = broker
	f.startSenders()
	fleet.Store(f)
	t.Cleanup(func() {
		close(f.done)
		c.Disconnect(100)
		f.closeShards()
	})
	return f
}

// Dial connects a fleet of clients connections outside a test
// (bench/rollout); fatal is told of an error the fleet cannot go on from.
// Close disconnects it.
func Dial(broker, prefix string, clients int, fatal func(error)) (*Fleet, error) {
	// The first client subscribes (report requests, offers): again on a
	// reconnect, which forgets its subscriptions.
	var fleet atomic.Pointer[Fleet]
	again := func(c paho.Client) { subscribeAgain(&fleet, c) }
	var cs []paho.Client
	for k := range max(1, clients) {
		var onReconnect func(paho.Client)
		if k == 0 {
			onReconnect = again
		}
		c, err := dial(broker, onReconnect)
		if err != nil {
			for _, c := range cs {
				c.Disconnect(0)
			}
			return nil, err
		}
		cs = append(cs, c)
	}
	f := newFleet(cs[0], prefix, fatal)
	f.cs, f.broker = cs, broker
	f.startSenders()
	fleet.Store(f)
	return f, nil
}

// subscribe subscribes the fleet's first client and remembers it, to
// subscribe again on a reconnect (Dial).
func (f *Fleet) subscribe(what string, filters map[string]byte, handle paho.MessageHandler) {
	f.mu.Lock()
	f.subs = append(f.subs, func(c paho.Client) { c.SubscribeMultiple(filters, handle) })
	f.mu.Unlock()
	f.wait(what, f.c.SubscribeMultiple(filters, handle))
}

// subscribeAgain makes the fleet's subscriptions again on its first
// client c, reconnected (nil before the fleet is made: none yet).
func subscribeAgain(fleet *atomic.Pointer[Fleet], c paho.Client) {
	f := fleet.Load()
	if f == nil {
		return
	}
	f.mu.Lock()
	subs := slices.Clone(f.subs)
	f.mu.Unlock()
	for _, s := range subs {
		s(c)
	}
}

// dial connects one of the fleet's clients; onConnect, if set, runs on
// every connection after the first (paho reconnects with a clean session:
// the broker has forgotten the client's subscriptions). The keepalive is
// long: on a machine at a load of 20 to 50 a fleet client missed its ping
// and paho reconnected it, and a subscription lost so lost a shard's
// offers (bench-rollout at 100,000 devices).
func dial(broker string, onReconnect func(paho.Client)) (paho.Client, error) {
	var connected atomic.Bool
	o := paho.NewClientOptions().AddBroker(strings.Replace(broker, "mqtt://", "tcp://", 1)).
		SetClientID(fmt.Sprintf("fakefleet-%d", rand.Int64())).SetWriteTimeout(time.Minute).
		SetKeepAlive(5 * time.Minute).SetPingTimeout(time.Minute).
		SetOnConnectHandler(func(c paho.Client) {
			if connected.Swap(true) && onReconnect != nil {
				onReconnect(c)
			}
		})
	c := paho.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
		return nil, fmt.Errorf("fakefleet: connect to %s: %v", broker, tok.Error())
	}
	return c, nil
}

func newFleet(c paho.Client, prefix string, fatal func(error)) *Fleet {
	return &Fleet{fatal: fatal, c: c, cs: []paho.Client{c}, topics: mqtt.Topics{Prefix: prefix}, outcome: map[string]*ota.Outcome{},
		offers: map[string]int{}, answered: map[string]bool{}}
}

func (f *Fleet) startSenders() {
	f.done = make(chan struct{})
	for _, c := range f.cs {
		f.senders = append(f.senders, newSender(c, f.done))
	}
}

// Close disconnects the fleet's clients.
func (f *Fleet) Close() {
	close(f.done)
	for _, c := range f.cs {
		c.Disconnect(250)
	}
	f.closeShards()
}

func (f *Fleet) closeShards() {
	f.mu.Lock()
	shards := f.shards
	f.shards = nil
	f.mu.Unlock()
	for _, c := range shards {
		c.Disconnect(250)
	}
}

// answer publishes device id's status, retained, through the one sender
// that speaks for it (a device's messages are in order, as over its own
// connection), without waiting.
func (f *Fleet) answer(id string) {
	h := fnv.New32a()
	h.Write([]byte(id))
	f.senders[int(h.Sum32()%uint32(len(f.senders)))].send(f.statusTopic(id), func() []byte { return f.status(id) })
}

func (f *Fleet) wait(what string, tok paho.Token) {
	if !tok.WaitTimeout(60*time.Second) || tok.Error() != nil {
		f.fatal(fmt.Errorf("fakefleet %s: %v", what, tok.Error()))
	}
}

func (f *Fleet) statusTopic(id string) string {
	t := f.topics
	t.Device = id
	return t.Status()
}

// status is device id's status now: idle, with its answer to the offer it
// took, if any.
func (f *Fleet) status(id string) []byte {
	f.mu.Lock()
	o := f.outcome[id]
	f.mu.Unlock()
	if o == nil {
		return Status(id, f.Groups...)
	}
	return encode(ota.Status{Device: id, Seq: 2, BootID: "fake", State: ota.Idle, BootedSlot: ota.SlotA, Groups: f.Groups,
		Slots: map[ota.Slot]ota.SlotStatus{ota.SlotA: {Version: "1.0.0", Status: ota.SlotGood}}, LastResult: o})
}

// Publish publishes the devices' statuses retained (QoS 1) and waits for the
// broker to take them all: each client a share, a window of them in
// flight at a time.
func (f *Fleet) Publish(ids []string) {
	const window = 512
	var wg sync.WaitGroup
	for k, c := range f.cs {
		wg.Go(func() {
			toks := make([]paho.Token, 0, window)
			for i := k; i < len(ids); i += len(f.cs) {
				toks = append(toks, c.Publish(f.statusTopic(ids[i]), 1, true, f.status(ids[i])))
				if len(toks) == window || i+len(f.cs) >= len(ids) {
					for _, tok := range toks {
						f.wait("publish", tok)
					}
					toks = toks[:0]
				}
			}
		})
	}
	wg.Wait()
}

// Answer makes the devices answer report requests to the whole fleet and
// to their groups as agents do: each publishes its status again, retained,
// at a random time within the request's window.
func (f *Fleet) Answer(ids []string) {
	filters := map[string]byte{f.topics.FleetReport(): 0}
	for _, g := range f.Groups {
		filters[f.topics.GroupReport(g)] = 0
	}
	f.subscribe("subscribe", filters, func(_ paho.Client, m paho.Message) {
		r, err := mqtt.ParseReportRequest(m.Payload())
		if err != nil || m.Retained() {
			return
		}
		for _, id := range ids {
			time.AfterFunc(rand.N(r.Window()), func() {
				f.answer(id)
				f.Answered.Add(1)
			})
		}
	})
}

// TakeOffers makes every device answer an offer on its desired topic as an
// agent would once it is done: a status whose last_result names the offer
// with result(id) (success, rolled_back, …; "" leaves the device silent).
// A device answers each offer (by manifest ID) once; every offer is counted.
// Every device's offer comes through the fleet's one subscribing
// connection: a wave offered faster than it reads them overflows a stock
// broker's queue for it (TakeOffersOf does not).
func (f *Fleet) TakeOffers(result func(id string) ota.Result) {
	t := f.topics
	t.Device = "+"
	f.subscribe("subscribe", map[string]byte{t.Desired(): 0}, f.taking(result))
}

// OfferShard is how many devices' offers one of TakeOffersOf's connections
// takes: a stock Mosquitto queues 1,000 messages for a client before it
// drops (max_queued_messages), so one wave's offers fit in a shard's queue
// however slowly the fake fleet reads them.
const OfferShard = 1000

// TakeOffersOf is TakeOffers for the devices ids, their desired topics
// shared out over connections of their own, OfferShard devices each,
// subscribed by exact topic: as each real device reads its offers on its
// own connection, no connection of the fake fleet is sent more of a wave's
// offers than a stock broker queues for a client.
func (f *Fleet) TakeOffersOf(ids []string, result func(id string) ota.Result) error {
	handle := f.taking(result)
	for start := 0; start < len(ids); start += OfferShard {
		topics := map[string]byte{}
		for _, id := range ids[start:min(start+OfferShard, len(ids))] {
			t := f.topics
			t.Device = id
			topics[t.Desired()] = 0
		}
		// Subscribed again on a reconnect: the retained offers sent
		// meanwhile arrive then, as they do to a device that was away.
		c, err := dial(f.broker, func(c paho.Client) { c.SubscribeMultiple(topics, handle) })
		if err != nil {
			return err
		}
		f.mu.Lock()
		f.shards = append(f.shards, c)
		f.mu.Unlock()
		if tok := c.SubscribeMultiple(topics, handle); !tok.WaitTimeout(time.Minute) || tok.Error() != nil {
			return fmt.Errorf("fakefleet: subscribe to %d offers: %v", len(topics), tok.Error())
		}
	}
	return nil
}

// taking is the handler of the offers: each counted, and answered once per
// manifest ID with result(id).
func (f *Fleet) taking(result func(id string) ota.Result) paho.MessageHandler {
	return func(_ paho.Client, m paho.Message) {
		id, _, ok := mqtt.DeviceOf(f.topics.Prefix, m.Topic())
		if !ok || len(m.Payload()) == 0 || (m.Retained() && f.tookAlready(id, m.Payload())) {
			return // a retained offer delivered again on a new subscription is not a new offer
		}
		f.Offered.Add(1)
		f.mu.Lock()
		f.offers[id]++
		f.arrived = append(f.arrived, time.Now())
		f.mu.Unlock()
		env, err := verify.ParseEnvelope(m.Payload())
		if err != nil {
			return
		}
		man, err := verify.ParseManifest(env.Manifest)
		if err != nil {
			return
		}
		f.mu.Lock()
		key := id + "\x00" + man.ID
		first := !f.answered[key]
		f.answered[key] = true
		f.mu.Unlock()
		r := result(id)
		if !first || r == "" {
			return
		}
		f.mu.Lock()
		f.outcome[id] = &ota.Outcome{ID: man.ID, SHA256: man.Payload.SHA256, Result: r}
		f.mu.Unlock()
		f.answer(id)
	}
}

// tookAlready: device id has answered the offer payload is already.
func (f *Fleet) tookAlready(id string, payload []byte) bool {
	env, err := verify.ParseEnvelope(payload)
	if err != nil {
		return false
	}
	man, err := verify.ParseManifest(env.Manifest)
	if err != nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.answered[id+"\x00"+man.ID]
}

// Offers are the offers each device received.
func (f *Fleet) Offers() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]int, len(f.offers))
	for k, v := range f.offers {
		out[k] = v
	}
	return out
}

// Arrivals are when each offer arrived, in order.
func (f *Fleet) Arrivals() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.arrived...)
}
