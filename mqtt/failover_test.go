package mqtt

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/internal/testkit/testtool"
)

// connectedTo names which of brokers a device's status reached.
func connectedTo(t *testing.T, bs []*mosquittotest.Broker, want string) int {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		for i, b := range bs {
			if b.PID() != 0 && strings.HasSuffix(retainedVia(t, b, "ota/devices/gw-1/status"), want) {
				return i
			}
		}
	}
	t.Fatalf("status %s reached no broker", want)
	return -1
}

// A device given the nodes of a cluster starts at one of them, and when
// that one goes, fails over to another with its jittered backoff: its
// status and subscriptions follow it there.
func TestDeviceFailsOver(t *testing.T) {
	bs := []*mosquittotest.Broker{mosquittotest.Start(t, mosquittotest.Options{Quiet: true}), mosquittotest.Start(t, mosquittotest.Options{Quiet: true})}
	o := newOffers()
	var logs testtool.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	d := dial(t, Config{Brokers: []string{bs[0].URL, bs[1].URL}, DeviceID: "gw-1", Logger: log}, o)
	waitFor(t, "connected", 10*time.Second, d.Connected)
	d.PublishStatus([]byte(`{"seq":1}`))
	first := connectedTo(t, bs, `{"seq":1}`)
	bs[first].Stop()
	// From the log, not by polling Connected: the reconnect's draw may be
	// shorter than a poll, and the device back up before one sees it down.
	waitFor(t, "connection lost", 10*time.Second, func() bool { return strings.Contains(logs.String(), `msg="mqtt: connection lost"`) })
	waitFor(t, "failed over", 15*time.Second, d.Connected)
	d.PublishStatus([]byte(`{"seq":2}`))
	if other := connectedTo(t, bs, `{"seq":2}`); other == first {
		t.Fatalf("still on broker %d", first)
	}
	mosquittoPub(t, bs[1-first], "-r", "-q", "1", "-t", "ota/devices/gw-1/desired", "-m", "on-the-other-node")
	nextWith(t, o.ch, "ota/devices/gw-1/desired", "on-the-other-node", 10*time.Second)
}

// Devices start at a random node: a fleet spreads over a cluster.
func TestDevicesSpreadOverNodes(t *testing.T) {
	cfg := Config{Brokers: []string{"mqtt://a:1883", "mqtt://b:1883", "mqtt://c:1883"}}
	firsts := map[string]int{}
	for range 300 {
		s, _, err := cfg.servers()
		if err != nil {
			t.Fatal(err)
		}
		firsts[s[0]]++
	}
	for _, b := range []string{"tcp://a:1883", "tcp://b:1883", "tcp://c:1883"} {
		if firsts[b] < 50 {
			t.Errorf("%s first %d times in 300: %v", b, firsts[b], firsts)
		}
	}
	if _, _, err := (Config{Broker: "mqtt://a", Brokers: []string{"mqtt://b"}}).servers(); err == nil || !errors.Is(err, ErrConfig) {
		t.Errorf("broker and brokers: %v", err)
	}
	if _, _, err := (Config{Brokers: []string{"mqtt://a", "mqtts://b"}}).servers(); err == nil || !strings.Contains(err.Error(), "mqtt.brokers[1]") {
		t.Errorf("mixed TLS: %v", err)
	}
}

// An operator session fails over too, resubscribes there, and after the
// reconnect holds its publishes until its gate check passes; a check that
// fails stops every publish with its error.
func TestSessionFailsOverBehindItsGate(t *testing.T) {
	bs := []*mosquittotest.Broker{mosquittotest.Start(t, mosquittotest.Options{Quiet: true}), mosquittotest.Start(t, mosquittotest.Options{Quiet: true})}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var mu sync.Mutex
	var got []string
	cfg := Config{Brokers: []string{bs[0].URL, bs[1].URL}, Reconnect: Backoff{First: 200 * time.Millisecond, Max: time.Second}, ConnectTimeout: 3 * time.Second}
	s, err := Open(ctx, cfg, map[string]byte{"ota/x": 1}, func(m Message) {
		mu.Lock()
		got = append(got, string(m.Payload))
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	checks := make(chan struct{}, 4)
	refuse := errors.New("not ours any more")
	var fail atomic.Bool
	s.Gate(func(context.Context) error {
		checks <- struct{}{}
		if fail.Load() {
			// Slow enough that the publish below is already waiting on the
			// gate: it must wake with this error, not time out.
			time.Sleep(500 * time.Millisecond)
			return refuse
		}
		return nil
	})
	if err := s.PublishRetained(ctx, []byte("one"), "ota/x"); err != nil {
		t.Fatal(err)
	}
	on := -1
	for i, b := range bs {
		if strings.HasSuffix(retainedVia(t, b, "ota/x"), "one") {
			on = i
		}
	}
	bs[on].Stop()
	select {
	case <-checks:
	case <-time.After(20 * time.Second):
		t.Fatal("no gate check after the failover")
	}
	if err := s.PublishRetained(ctx, []byte("two"), "ota/x"); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(retainedVia(t, bs[1-on], "ota/x"), "two") {
		t.Fatal("not published on the other node")
	}
	mosquittoPub(t, bs[1-on], "-q", "1", "-t", "ota/x", "-m", "three")
	waitFor(t, "resubscribed there", 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) > 0 && got[len(got)-1] == "three"
	})
	fail.Store(true)
	bs[on].Restart()
	bs[1-on].Stop()
	select {
	case <-checks:
	case <-time.After(20 * time.Second):
		t.Fatal("no gate check after the second failover")
	}
	if err := s.PublishRetained(ctx, []byte("four"), "ota/x"); !errors.Is(err, refuse) {
		t.Fatalf("a publish after a failed check: %v", err)
	}
}
