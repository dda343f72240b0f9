package mqtt

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/otad/otad/internal/testkit/mosquittotest"
)

// received is one message as a subscriber saw it.
type received struct {
	topic    string
	payload  string
	retained bool
	qos      byte
}

// observe subscribes a plain client to filter at QoS 2 (so a message keeps the QoS it was
// published with) and returns what arrives. clientID "" is a fresh clean session; a fixed
// clientID is a persistent session that survives broker restarts.
func observe(t *testing.T, cfg Config, clientID, filter string) <-chan received {
	t.Helper()
	ch := make(chan received, 256)
	cfg.DeviceID = clientID
	opts, err := operatorOptions(cfg)
	if err != nil {
		t.Fatal(err)
	}
	opts.SetCleanSession(clientID == "").SetAutoReconnect(true).
		SetDefaultPublishHandler(func(_ paho.Client, m paho.Message) {
			ch <- received{m.Topic(), string(m.Payload()), m.Retained(), m.Qos()}
		}).
		SetOnConnectHandler(func(c paho.Client) { c.Subscribe(filter, 2, nil) })
	c := paho.NewClient(opts)
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("observer connect: %v", tok.Error())
	}
	t.Cleanup(func() { c.Disconnect(100) })
	// The subscription is made in OnConnect; wait for its SUBACK so nothing is missed.
	tok := c.Subscribe(filter, 2, nil)
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("observer subscribe %s: %v", filter, tok.Error())
	}
	return ch
}

// next returns the next message on topic (others are skipped), failing after timeout.
func next(t *testing.T, ch <-chan received, topic string, timeout time.Duration) received {
	t.Helper()
	return nextMatching(t, ch, topic, timeout, func(received) bool { return true }, "")
}

// nextWith waits for a message on topic with payload want, skipping others.
func nextWith(t *testing.T, ch <-chan received, topic, want string, timeout time.Duration) received {
	t.Helper()
	return nextMatching(t, ch, topic, timeout, func(m received) bool { return m.payload == want }, fmt.Sprintf(" %q", want))
}

func nextMatching(t *testing.T, ch <-chan received, topic string, timeout time.Duration, ok func(received) bool, what string) received {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case m := <-ch:
			if m.topic == topic && ok(m) {
				return m
			}
		case <-deadline:
			t.Fatalf("no message%s on %s within %v", what, topic, timeout)
		}
	}
}

// none fails if a message on topic arrives within d.
func none(t *testing.T, ch <-chan received, topic string, d time.Duration) {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case m := <-ch:
			if m.topic == topic {
				t.Fatalf("unexpected message on %s: %q (retained %v)", topic, m.payload, m.retained)
			}
		case <-deadline:
			return
		}
	}
}

// retainedVia reads topic's retained message with a fresh mosquitto_sub: "" if none.
func retainedVia(t *testing.T, b *mosquittotest.Broker, topic string) string {
	t.Helper()
	bin := mosquittotest.Require(t, "mosquitto_sub", "mosquitto-clients")
	// --retained-only ends at the first non-retained message; -W 1 ends when there is none.
	out, err := exec.Command(bin, "-h", "127.0.0.1", "-p", strconv.Itoa(b.Port), "-t", topic, "-q", "2",
		"-C", "1", "-W", "1", "--retained-only", "-F", "%r %q %p").CombinedOutput()
	got := strings.TrimSpace(string(out))
	if got == "Timed out" { // -W expired: nothing retained
		return ""
	}
	if err != nil {
		t.Fatalf("mosquitto_sub %s: %v: %s", topic, err, out)
	}
	return got
}

// mosquittoPub publishes with the real CLI; extra are mosquitto_pub arguments.
func mosquittoPub(t *testing.T, b *mosquittotest.Broker, extra ...string) {
	t.Helper()
	bin := mosquittotest.Require(t, "mosquitto_pub", "mosquitto-clients")
	args := append([]string{"-h", "127.0.0.1", "-p", strconv.Itoa(b.Port)}, extra...)
	if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
		t.Fatalf("mosquitto_pub %v: %v: %s", extra, err, out)
	}
}

// offers collects what a Device hands to onOffer.
type offers struct {
	mu  sync.Mutex
	got []received
	ch  chan received
}

func newOffers() *offers { return &offers{ch: make(chan received, 256)} }

func (o *offers) handle(topic string, payload []byte) {
	m := received{topic: topic, payload: string(payload)}
	o.mu.Lock()
	o.got = append(o.got, m)
	o.mu.Unlock()
	o.ch <- m
}

func (o *offers) topics() map[string]bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	seen := map[string]bool{}
	for _, m := range o.got {
		seen[m.topic] = true
	}
	return seen
}

// dial starts a Device and closes it at the end of the test.
func dial(t *testing.T, cfg Config, o *offers) *Conn {
	t.Helper()
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 3 * time.Second
	}
	if cfg.Reconnect == (Backoff{}) {
		cfg.Reconnect = Backoff{First: 200 * time.Millisecond, Max: time.Second}
	}
	d, err := Dial(cfg, o.handle)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := d.Close(ctx); err != nil {
			t.Logf("close: %v", err)
		}
	})
	return d
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func payloadN(kind string, n int) []byte { return []byte(fmt.Sprintf(`{"%s":%d}`, kind, n)) }

// all waits until every topic → payload in want has arrived, in any order.
func all(t *testing.T, ch <-chan received, want map[string]string, timeout time.Duration) {
	t.Helper()
	missing := map[string]string{}
	for k, v := range want {
		missing[k] = v
	}
	deadline := time.After(timeout)
	for len(missing) > 0 {
		select {
		case m := <-ch:
			if p, ok := missing[m.topic]; ok && p == m.payload {
				delete(missing, m.topic)
			}
		case <-deadline:
			t.Fatalf("not received within %v: %v", timeout, missing)
		}
	}
}
