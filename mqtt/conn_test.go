package mqtt

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/internal/testkit/testtool"
)

func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	notPEM := testtool.WriteFile(t, filepath.Join(dir, "ca.txt"), []byte("hello"))
	pki := mosquittotest.NewPKI(t)
	cert, key := pki.Client(t, "gw-1")
	ok := Config{Broker: "mqtt://127.0.0.1:1883", DeviceID: "gw-1"}
	tests := []struct {
		name string
		edit func(*Config)
		want string // substring of the error, naming the key or file
	}{
		{"no broker", func(c *Config) { c.Broker = "" }, "mqtt.broker: empty"},
		{"bad scheme", func(c *Config) { c.Broker = "http://h:1" }, `scheme "http"`},
		{"no host", func(c *Config) { c.Broker = "mqtt://:1883" }, "no host"},
		{"path", func(c *Config) { c.Broker = "mqtt://h:1883/x" }, "scheme://host:port only"},
		{"not a URL", func(c *Config) { c.Broker = "mqtt://[::1" }, "mqtt.broker"},
		{"no device", func(c *Config) { c.DeviceID = "" }, "device_id: not a valid name: empty"},
		{"device with dot", func(c *Config) { c.DeviceID = "gw.1" }, "device_id"},
		{"device with slash", func(c *Config) { c.DeviceID = "a/b" }, "device_id"},
		{"group wildcard", func(c *Config) { c.Groups = []string{"ok", "c+"} }, "mqtt.groups[1]"},
		{"prefix wildcard", func(c *Config) { c.TopicPrefix = "ota/#" }, "mqtt.topic_prefix"},
		{"prefix with levels", func(c *Config) { c.TopicPrefix = "acme/ota" }, "mqtt.topic_prefix"},
		{"missing CA", func(c *Config) { c.Broker = "mqtts://h"; c.CAFile = filepath.Join(dir, "nope.pem") }, "nope.pem"},
		{"CA not PEM", func(c *Config) { c.Broker = "mqtts://h"; c.CAFile = notPEM }, "ca.txt: no PEM"},
		{"cert without key", func(c *Config) { c.CertFile = cert }, "mqtt.key_file"},
		{"key without cert", func(c *Config) { c.KeyFile = key }, "mqtt.cert_file"},
		{"missing key file", func(c *Config) { c.CertFile = cert; c.KeyFile = filepath.Join(dir, "gone.key") }, "gone.key"},
		{"key does not match", func(c *Config) { c.CertFile = cert; c.KeyFile = notPEM }, cert},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := ok
			tt.edit(&cfg)
			d, err := Dial(cfg, func(string, []byte) {})
			if err == nil {
				d.Close(context.Background())
				t.Fatal("Dial accepted a bad config")
			}
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q: want ErrConfig mentioning %q", err, tt.want)
			}
		})
	}
	if _, err := Dial(ok, nil); !errors.Is(err, ErrConfig) {
		t.Errorf("nil handler: %v", err)
	}
}

func TestBrokerURL(t *testing.T) {
	tests := []struct {
		in, server string
		tls        bool
	}{
		{"mqtt://broker:1884", "tcp://broker:1884", false},
		{"mqtt://broker", "tcp://broker:1883", false},
		{"tcp://10.0.0.1:1", "tcp://10.0.0.1:1", false},
		{"mqtts://broker", "ssl://broker:8883", true},
		{"ssl://broker:9", "ssl://broker:9", true},
		{"TLS://[::1]:8883", "ssl://[::1]:8883", true},
	}
	for _, tt := range tests {
		server, useTLS, _, err := brokerURL("mqtt.broker", tt.in)
		if err != nil || server != tt.server || useTLS != tt.tls {
			t.Errorf("brokerURL(%q) = %q, %v, %v; want %q, %v", tt.in, server, useTLS, err, tt.server, tt.tls)
		}
	}
}

func TestTopics(t *testing.T) {
	tp := Topics{Prefix: "fleet/ota", Device: "gw-1"}
	got := []string{tp.Desired(), tp.Group("canary"), tp.Status(), tp.Events(), tp.Progress(), tp.Online()}
	want := []string{"fleet/ota/devices/gw-1/desired", "fleet/ota/groups/canary/desired", "fleet/ota/devices/gw-1/status",
		"fleet/ota/devices/gw-1/events", "fleet/ota/devices/gw-1/progress", "fleet/ota/devices/gw-1/online"}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("topic %d = %q, want %q", i, got[i], want[i])
		}
	}
	if s := (Topics{Device: "x"}).Status(); s != "ota/devices/x/status" {
		t.Errorf("default prefix: %q", s)
	}
	for _, tt := range []struct {
		topic, dev, leaf string
		ok               bool
	}{
		{"ota/devices/gw-1/status", "gw-1", "status", true},
		{"ota/devices/gw-1/status/x", "", "", false},
		{"ota/devices//status", "", "", false},
		{"ota/groups/g/desired", "", "", false},
		{"other/devices/gw-1/status", "", "", false},
	} {
		dev, leaf, ok := DeviceOf("", tt.topic)
		if dev != tt.dev || leaf != tt.leaf || ok != tt.ok {
			t.Errorf("DeviceOf(%q) = %q, %q, %v", tt.topic, dev, leaf, ok)
		}
	}
}

// Offers published retained with the real mosquitto_pub reach onOffer, from the device's
// topic and its groups' (only those); an empty retained message clears and arrives empty.
func TestOffers(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{})
	mosquittoPub(t, b, "-r", "-q", "1", "-t", "ota/devices/gw-1/desired", "-m", "offer-device")
	mosquittoPub(t, b, "-r", "-q", "1", "-t", "ota/groups/canary/desired", "-m", "offer-canary")
	mosquittoPub(t, b, "-r", "-q", "1", "-t", "ota/groups/other/desired", "-m", "offer-other")
	mosquittoPub(t, b, "-r", "-q", "1", "-t", "ota/devices/gw-2/desired", "-m", "offer-gw-2")

	o := newOffers()
	d := dial(t, Config{Broker: b.URL, DeviceID: "gw-1", Groups: []string{"canary", "eu"}}, o)
	all(t, o.ch, map[string]string{"ota/devices/gw-1/desired": "offer-device", "ota/groups/canary/desired": "offer-canary"}, 10*time.Second)
	if !d.Connected() {
		t.Error("Connected() false after offers arrived")
	}

	// Live (not retained) delivery on a group topic, then clears of both.
	mosquittoPub(t, b, "-r", "-q", "1", "-t", "ota/groups/eu/desired", "-m", "offer-eu")
	nextWith(t, o.ch, "ota/groups/eu/desired", "offer-eu", 5*time.Second)
	mosquittoPub(t, b, "-r", "-q", "1", "-t", "ota/devices/gw-1/desired", "-n")
	nextWith(t, o.ch, "ota/devices/gw-1/desired", "", 5*time.Second)
	mosquittoPub(t, b, "-r", "-q", "1", "-t", "ota/groups/canary/desired", "-n")
	nextWith(t, o.ch, "ota/groups/canary/desired", "", 5*time.Second)

	none(t, o.ch, "", 300*time.Millisecond) // let stragglers in
	for topic := range o.topics() {
		if !map[string]bool{"ota/devices/gw-1/desired": true, "ota/groups/canary/desired": true, "ota/groups/eu/desired": true}[topic] {
			t.Errorf("offer from a topic the device does not follow: %s", topic)
		}
	}
}

// Status, events, progress and presence land on their topics with the docs/contract/mqtt.md QoS and
// retain flags.
func TestPublishTopicsQoSRetain(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{})
	cfg := Config{Broker: b.URL, DeviceID: "gw-1"}
	live := observe(t, cfg, "", "ota/devices/gw-1/#")
	d := dial(t, cfg, newOffers())
	if m := next(t, live, "ota/devices/gw-1/online", 10*time.Second); m.payload != `{"online":true}` || m.qos != 1 {
		t.Errorf("online: %+v", m)
	}
	d.PublishStatus([]byte(`{"seq":1}`))
	d.PublishEvent([]byte(`{"event":1}`))
	d.PublishProgress([]byte(`{"bytes_done":1}`))

	got := map[string]received{}
	deadline := time.After(5 * time.Second)
	for len(got) < 3 {
		select {
		case m := <-live:
			if _, seen := got[m.topic]; !seen && m.topic != "ota/devices/gw-1/online" {
				got[m.topic] = m
			}
		case <-deadline:
			t.Fatalf("only got %v", got)
		}
	}
	for _, tt := range []struct {
		topic, payload string
		qos            byte
	}{
		{"ota/devices/gw-1/status", `{"seq":1}`, 1},
		{"ota/devices/gw-1/events", `{"event":1}`, 1},
		{"ota/devices/gw-1/progress", `{"bytes_done":1}`, 0},
	} {
		m := got[tt.topic]
		if m.payload != tt.payload || m.qos != tt.qos || m.retained {
			t.Errorf("%s: got %+v, want payload %s QoS %d (live delivery, retain flag clear)", tt.topic, m, tt.payload, tt.qos)
		}
	}

	// A fresh subscriber sees only what is retained: status and online.
	for _, tt := range []struct{ topic, want string }{
		{"ota/devices/gw-1/status", `1 1 {"seq":1}`},
		{"ota/devices/gw-1/online", `1 1 {"online":true}`},
		{"ota/devices/gw-1/events", ""},
		{"ota/devices/gw-1/progress", ""},
	} {
		if got := retainedVia(t, b, tt.topic); got != tt.want {
			t.Errorf("retained %s = %q, want %q (\"retain qos payload\")", tt.topic, got, tt.want)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := d.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if got := retainedVia(t, b, "ota/devices/gw-1/online"); got != `1 1 {"online":false}` {
		t.Errorf("after Close, online retained = %q", got)
	}
	if d.Connected() {
		t.Error("Connected() after Close")
	}
}

// Progress is held to 2 a second, and the last message of a burst is not lost.
func TestProgressRateLimit(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{})
	cfg := Config{Broker: b.URL, DeviceID: "gw-1"}
	live := observe(t, cfg, "", "ota/devices/gw-1/progress")
	d := dial(t, cfg, newOffers())
	waitFor(t, "connect", 10*time.Second, d.Connected)
	time.Sleep(100 * time.Millisecond) // OnConnect has run

	start := time.Now()
	for i := 1; i <= 50; i++ {
		d.PublishProgress(payloadN("bytes_done", i))
	}
	var got []received
	deadline := time.After(3 * time.Second)
collect:
	for {
		select {
		case m := <-live:
			got = append(got, m)
			if m.payload == string(payloadN("bytes_done", 50)) {
				break collect
			}
		case <-deadline:
			t.Fatalf("last progress of the burst never arrived; got %v", got)
		}
	}
	elapsed := time.Since(start)
	if len(got) > 2 {
		t.Errorf("%d progress messages for a burst of 50, want at most 2: %v", len(got), got)
	}
	if len(got) == 2 && elapsed < progressInterval-50*time.Millisecond {
		t.Errorf("2 progress messages within %v, want them %v apart", elapsed, progressInterval)
	}
}

// The Device reconnects by itself after the broker comes back, renews its subscriptions
// (after a wipe the broker has no session for it) and publishes the status and events
// raised while the broker was down.
func TestReconnect(t *testing.T) {
	for _, tt := range []struct {
		name string
		wipe bool // the broker comes back without sessions or retained messages
	}{
		{"broker restart keeps session", false},
		{"broker restart loses session", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := mosquittotest.Start(t, mosquittotest.Options{})
			cfg := Config{Broker: b.URL, DeviceID: "gw-1", Groups: []string{"canary"}}
			// A persistent observer: the broker queues events for it while it is away.
			events := observe(t, cfg, "observer-"+strings.ReplaceAll(tt.name, " ", "-"), "ota/devices/gw-1/events")
			o := newOffers()
			d := dial(t, cfg, o)
			waitFor(t, "first connect", 10*time.Second, d.Connected)
			d.PublishStatus([]byte(`{"seq":1}`))
			nextWith(t, observe(t, cfg, "", "ota/devices/gw-1/status"), "ota/devices/gw-1/status", `{"seq":1}`, 5*time.Second)

			b.Stop()
			if tt.wipe {
				b.Wipe()
			}
			waitFor(t, "connection lost", 10*time.Second, func() bool { return !d.Connected() })
			d.PublishStatus([]byte(`{"seq":2}`))
			d.PublishEvent([]byte(`{"event":"while down"}`))
			d.PublishProgress([]byte(`{"dropped":true}`)) // progress is not kept for later
			b.Restart()
			waitFor(t, "reconnect", 15*time.Second, d.Connected)

			// The latest status is what the broker retains, published after the reconnect.
			nextWith(t, observe(t, cfg, "", "ota/devices/gw-1/status"), "ota/devices/gw-1/status", `{"seq":2}`, 5*time.Second)
			nextWith(t, observe(t, cfg, "", "ota/devices/gw-1/online"), "ota/devices/gw-1/online", `{"online":true}`, 5*time.Second)
			// New offers reach the device: its subscriptions are in place again.
			mosquittoPub(t, b, "-r", "-q", "1", "-t", "ota/devices/gw-1/desired", "-m", "after-restart")
			nextWith(t, o.ch, "ota/devices/gw-1/desired", "after-restart", 10*time.Second)
			mosquittoPub(t, b, "-r", "-q", "1", "-t", "ota/groups/canary/desired", "-m", "group-after-restart")
			nextWith(t, o.ch, "ota/groups/canary/desired", "group-after-restart", 10*time.Second)
			if !tt.wipe {
				// The event raised while the broker was down is delivered (to a persistent
				// subscriber that was away too, so the broker queued it).
				nextWith(t, events, "ota/devices/gw-1/events", `{"event":"while down"}`, 10*time.Second)
			}
		})
	}
}

// A device boots with the broker down: Dial still returns, what it publishes meanwhile
// arrives once the broker is up, and Close does not hang on an absent broker.
func TestBrokerDownAtDial(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{})
	b.Stop()
	cfg := Config{Broker: b.URL, DeviceID: "gw-1"}
	o := newOffers()
	d := dial(t, cfg, o)
	d.PublishStatus([]byte(`{"seq":7}`))
	time.Sleep(300 * time.Millisecond)
	if d.Connected() {
		t.Fatal("connected to a stopped broker")
	}
	b.Restart()
	waitFor(t, "connect after broker start", 15*time.Second, d.Connected)
	nextWith(t, observe(t, cfg, "", "ota/devices/gw-1/status"), "ota/devices/gw-1/status", `{"seq":7}`, 5*time.Second)

	// A second device that never reaches a broker closes promptly.
	d2, err := Dial(Config{Broker: "mqtt://127.0.0.1:" + itoa(mosquittotest.FreePort(t)), DeviceID: "gw-9"}, o.handle)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	if err := d2.Close(ctx); err != nil {
		t.Errorf("Close with no broker: %v", err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("Close with no broker took %v", el)
	}
}

// helperEnv makes the test binary act as a device process (TestHelperDevice).
const helperEnv = "OTAD_MQTT_HELPER_BROKER"

// TestHelperDevice is not a test: run by TestWillOnKill as a separate process, it dials,
// says "connected" and waits to be killed.
func TestHelperDevice(t *testing.T) {
	broker := os.Getenv(helperEnv)
	if broker == "" {
		return
	}
	d, err := Dial(Config{Broker: broker, DeviceID: "gw-killed"}, func(string, []byte) {})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !d.Connected() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	os.Stdout.WriteString("connected\n")
	time.Sleep(time.Minute)
}

// A device process killed without a goodbye: the broker publishes its Last Will, a
// retained {"online":false}.
func TestWillOnKill(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{})
	cfg := Config{Broker: b.URL}
	online := observe(t, cfg, "", "ota/devices/gw-killed/online")

	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperDevice$", "-test.v")
	cmd.Env = append(os.Environ(), helperEnv+"="+b.URL)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "connected" {
				ready <- true
			}
		}
		close(ready)
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatal("helper device exited before connecting")
		}
	case <-time.After(15 * time.Second):
		t.Fatal("helper device did not connect")
	}
	nextWith(t, online, "ota/devices/gw-killed/online", `{"online":true}`, 5*time.Second)

	if err := cmd.Process.Kill(); err != nil { // SIGKILL: no DISCONNECT, no Close
		t.Fatal(err)
	}
	nextWith(t, online, "ota/devices/gw-killed/online", `{"online":false}`, 10*time.Second)
	if got := retainedVia(t, b, "ota/devices/gw-killed/online"); got != `1 1 {"online":false}` {
		t.Errorf("retained online after kill = %q", got)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
