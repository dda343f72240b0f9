package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/otad/otad/device/control"
	"github.com/otad/otad/device/daemon"
	"github.com/otad/otad/device/statelock"
	"github.com/otad/otad/internal/testkit/devicetest"
	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/ota"
)

const devID = "gw-0001"

// observer records what the device publishes, as the cloud sees it.
type observer struct {
	mu     sync.Mutex
	status ota.Status
	events []ota.Event
	online string
	c      paho.Client
}

func observe(t *testing.T, broker string) *observer {
	t.Helper()
	o := &observer{}
	o.c = mosquittotest.Client(t, broker, fmt.Sprint("observer-", time.Now().UnixNano())) // two observers must not take over each other
	sub := func(topic string, fn func([]byte)) {
		mosquittotest.Subscribe(t, o.c, topic, func(_ paho.Client, m paho.Message) {
			o.mu.Lock()
			defer o.mu.Unlock()
			fn(m.Payload())
		})
	}
	sub("ota/devices/"+devID+"/status", func(b []byte) {
		var st ota.Status // fresh: snapshots handed out share its pointers
		if json.Unmarshal(b, &st) == nil {
			o.status = st
		}
	})
	sub("ota/devices/"+devID+"/events", func(b []byte) {
		var e ota.Event
		json.Unmarshal(b, &e)
		o.events = append(o.events, e)
	})
	sub("ota/devices/"+devID+"/online", func(b []byte) { o.online = string(b) })
	return o
}

func (o *observer) snapshot() (ota.Status, []ota.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.status, append([]ota.Event(nil), o.events...)
}

// waitStatus waits until the retained status satisfies ok.
func (o *observer) waitStatus(t *testing.T, what string, ok func(ota.Status) bool) ota.Status {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if st, _ := o.snapshot(); ok(st) {
			return st
		}
		time.Sleep(20 * time.Millisecond)
	}
	st, ev := o.snapshot()
	t.Fatalf("timed out waiting for %s; status %+v; %d events", what, st, len(ev))
	return ota.Status{}
}

// runDevice runs the daemon like systemd would, starting it again after
// every (simulated) reboot, until stop is called.
func runDevice(t *testing.T, tb *devicetest.Testbed) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			lock, err := statelock.Acquire(tb.Cfg.StateDir)
			if err != nil {
				t.Error(err)
				return
			}
			err = daemon.Run(ctx, tb.Cfg, daemon.Options{AgentVersion: "test", Logger: slog.New(slog.DiscardHandler),
				Reconnect: mqtt.Backoff{First: 200 * time.Millisecond, Max: 2 * time.Second}})
			lock.Release()
			if err != nil {
				t.Error(err)
				return
			}
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

func mosquittoPub(t *testing.T, b *mosquittotest.Broker, topic string, payload []byte, retained bool) {
	t.Helper()
	bin := mosquittotest.Require(t, "mosquitto_pub", "mosquitto-clients")
	f := filepath.Join(t.TempDir(), "payload")
	devicetest.Must(t, os.WriteFile(f, payload, 0o600))
	args := []string{"-p", fmt.Sprint(b.Port), "-h", "127.0.0.1", "-q", "1", "-t", topic, "-f", f}
	if retained {
		args = append(args, "-r")
	}
	if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
		t.Fatalf("mosquitto_pub: %v: %s", err, out)
	}
}

func installsStarted(evs []ota.Event) (n int, ids []string) {
	for _, e := range evs {
		if e.To == ota.Downloading && (e.From == ota.Idle || e.Result == "") && e.From != ota.Downloading {
			n++
			ids = append(ids, e.ID)
		}
	}
	return n, ids
}

func TestOfferOverMQTTInstallsAndCommits(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{})
	tb := devicetest.New(t, devicetest.Options{Broker: b.URL, Groups: []string{"canary"}})
	obs := observe(t, b.URL)
	env, sum := tb.Offer("v2", 2, devicetest.OfferOpts{SecVer: 3})
	runDevice(t, tb)
	idle := obs.waitStatus(t, "the device online and idle", func(s ota.Status) bool { return s.State == ota.Idle && s.BootedSlot == "A" })
	if !slices.Equal(idle.Groups, []string{"canary"}) {
		t.Errorf("status groups %q, want the configured [canary] (a rollout finds a group's devices by them)", idle.Groups)
	}
	mosquittoPub(t, b, "ota/devices/"+devID+"/desired", env, true)
	st := obs.waitStatus(t, "success", func(s ota.Status) bool { return s.LastResult != nil && s.LastResult.Result == ota.ResultSuccess })
	if st.BootedSlot != "B" || st.Slots["B"].SHA256 != sum || st.State != ota.Idle {
		t.Fatalf("final status: %+v", st)
	}
	// Events travel on their own topic, just behind the status.
	var evs []ota.Event
	for i := 0; ; i++ {
		_, evs = obs.snapshot()
		if slices.ContainsFunc(evs, func(e ota.Event) bool { return e.Result == ota.ResultSuccess }) {
			break
		}
		if i > 500 {
			t.Fatalf("no success event; %d events", len(evs))
		}
		time.Sleep(10 * time.Millisecond)
	}
	var path []string
	var last uint64
	for _, e := range evs {
		if e.Seq <= last {
			t.Errorf("event seq %d after %d", e.Seq, last)
		}
		last = e.Seq
		if e.From != e.To {
			path = append(path, string(e.To))
		}
	}
	want := []string{"downloading", "verifying", "staged", "rebooting", "confirming", "idle"}
	if fmt.Sprint(path) != fmt.Sprint(want) {
		t.Fatalf("transitions %v, want %v", path, want)
	}
	var outcome *ota.Event
	for i := range evs {
		if evs[i].Result != "" {
			outcome = &evs[i]
		}
	}
	if outcome == nil || outcome.Result != ota.ResultSuccess || outcome.SHA256 != sum {
		t.Fatalf("last outcome event %+v", outcome)
	}
}

// 50 copies of one offer, a group offer that is older, and a QoS 1
// redelivery after the broker restarts: exactly one install, of the newest.
func TestDuplicatesAndConflictingTopics(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{})
	tb := devicetest.New(t, devicetest.Options{Broker: b.URL, Groups: []string{"canary"}, Policy: "manual"})
	obs := observe(t, b.URL)
	now := time.Now().UTC()
	older, _ := tb.Offer("group-old", 5, devicetest.OfferOpts{Issued: now.Add(-2 * time.Hour)})
	newer, sum := tb.Offer("dev-new", 6, devicetest.OfferOpts{Issued: now.Add(-time.Hour)})
	// Retained before the device connects: both arrive together on connect.
	mosquittoPub(t, b, "ota/devices/"+devID+"/desired", newer, true)
	mosquittoPub(t, b, "ota/groups/canary/desired", older, true)
	runDevice(t, tb)
	obs.waitStatus(t, "staged (manual policy)", func(s ota.Status) bool { return s.State == ota.Staged })
	for range 50 {
		mosquittoPub(t, b, "ota/devices/"+devID+"/desired", newer, false)
	}
	b.Restart() // the device reconnects; retained offers are delivered again
	mosquittoPub(t, b, "ota/groups/canary/desired", older, true)
	time.Sleep(2 * time.Second)
	st, evs := obs.snapshot()
	if n, ids := installsStarted(evs); n != 1 || ids[0] != "rel-dev-new" {
		t.Fatalf("installs started: %d %v, want exactly one of rel-dev-new", n, ids)
	}
	if st.State != ota.Staged || st.Target == nil || st.Target.SHA256 != sum {
		t.Fatalf("status %+v", st)
	}
	if devicetest.FileSHA(t, tb.Cfg.Slots.B, devicetest.ImageSize) != sum {
		t.Fatal("slot B does not hold the newest image")
	}
}

// The broker goes away mid-install: the install completes anyway and the
// retained status catches up once the broker is back.
func TestBrokerOutageMidInstall(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{})
	tb := devicetest.New(t, devicetest.Options{Broker: b.URL})
	obs := observe(t, b.URL)
	env, sum := tb.Offer("v2", 2, devicetest.OfferOpts{})
	tb.Throttle.Store(true)
	runDevice(t, tb)
	mosquittoPub(t, b, "ota/devices/"+devID+"/desired", env, true)
	obs.waitStatus(t, "downloading", func(s ota.Status) bool { return s.State == ota.Downloading })
	b.Stop()
	// The install goes on without the broker: wait for the device to commit.
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if j := tb.Journal(); j.LastResult != nil && j.LastResult.Result == ota.ResultSuccess {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if j := tb.Journal(); j.LastResult == nil || j.LastResult.Result != ota.ResultSuccess {
		t.Fatalf("install did not complete while the broker was down: %+v", j.LastResult)
	}
	b.Restart()
	obs2 := observe(t, b.URL)
	st := obs2.waitStatus(t, "status caught up", func(s ota.Status) bool {
		return s.LastResult != nil && s.LastResult.Result == ota.ResultSuccess
	})
	if st.BootedSlot != "B" || st.Slots["B"].SHA256 != sum {
		t.Fatalf("status after reconnect: %+v", st)
	}
}

// A refused offer shows in the status and the events with its code.
func TestRefusedOfferIsReported(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{})
	tb := devicetest.New(t, devicetest.Options{Broker: b.URL, Groups: []string{"canary"}})
	obs := observe(t, b.URL)
	runDevice(t, tb)
	obs.waitStatus(t, "online", func(s ota.Status) bool { return s.BootedSlot == "A" })
	cases := []struct {
		code  ota.Code
		topic string
		raw   []byte
	}{
		{"bad_envelope", "ota/devices/" + devID + "/desired", []byte("not json")},
		{"incompatible", "ota/groups/canary/desired", func() []byte {
			e, _ := tb.Offer("x", 3, devicetest.OfferOpts{Compat: "acme,other"})
			return e
		}()},
		{"expired", "ota/devices/" + devID + "/desired", func() []byte {
			e, _ := tb.Offer("y", 3, devicetest.OfferOpts{Issued: time.Now().Add(-72 * time.Hour), Expires: time.Hour})
			return e
		}()},
	}
	for _, c := range cases {
		mosquittoPub(t, b, c.topic, c.raw, true)
		obs.waitStatus(t, string(c.code), func(s ota.Status) bool {
			return s.LastResult == nil && s.LastRefusal != nil && s.LastRefusal.Code == c.code
		})
		// The event follows the status on its own topic.
		for i := 0; ; i++ {
			_, evs := obs.snapshot()
			if e := evs[len(evs)-1]; e.Result == ota.ResultRejected && e.Code == c.code {
				break
			}
			if i > 500 {
				t.Fatalf("no rejected %s event; last %+v", c.code, evs[len(evs)-1])
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if tb.Fetched.Load() != 0 {
		t.Fatal("bytes fetched for refused offers")
	}
}

// The trust directory is watched: a removed key stops being trusted at once,
// a bad key file is logged and ignored, and a key put back is trusted again.
func TestTrustDirReload(t *testing.T) {
	tb := devicetest.New(t, devicetest.Options{Policy: "manual"})
	ctx, cancel := context.WithCancel(context.Background())
	lock, err := statelock.Acquire(tb.Cfg.StateDir)
	devicetest.Must(t, err)
	dmn, err := daemon.New(tb.Cfg, daemon.Options{AgentVersion: "test", Logger: slog.New(slog.DiscardHandler)})
	devicetest.Must(t, err)
	done := make(chan error, 1)
	go func() { done <- dmn.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; lock.Release() })
	d := dmn.Node()
	// The control socket answers once the trust directory is watched.
	for i := 0; ; i++ {
		if _, err := (control.Client{Path: tb.Cfg.ControlSocket}).Status(ctx); err == nil {
			break
		} else if i > 500 {
			t.Fatalf("daemon not up: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	keyFile := filepath.Join(tb.Cfg.Trust.KeysDir, "release.pub")
	pub, err := os.ReadFile(keyFile)
	devicetest.Must(t, err)
	waitKeys := func(n int) {
		for i := 0; d.Keys.Keyring().Len() != n; i++ {
			if i > 500 {
				t.Fatalf("keyring has %d keys, want %d", d.Keys.Keyring().Len(), n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	install := func(name string, seed uint64) ota.Outcome {
		env, _ := tb.Offer(name, seed, devicetest.OfferOpts{Issued: time.Now().UTC()})
		o, err := d.Agent.Install(context.Background(), env)
		devicetest.Must(t, err)
		return o
	}
	// The agent runs once the watch is set: wait for it before changing the directory.
	for i := 0; d.Agent.Status().Seq == 0; i++ {
		if i > 500 {
			t.Fatal("daemon did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	devicetest.Must(t, os.Remove(keyFile))
	waitKeys(0)
	if o := install("a", 1); o.Code != "bad_signature" {
		t.Fatalf("with the key removed: %+v", o)
	}
	devicetest.Must(t, os.WriteFile(filepath.Join(tb.Cfg.Trust.KeysDir, "junk.pub"), []byte("not a key"), 0o644))
	devicetest.Must(t, os.WriteFile(keyFile, pub, 0o644))
	waitKeys(1)
	if o := install("b", 2); o.Result != ota.ResultStaged {
		t.Fatalf("with the key back: %+v", o)
	}
}

// otad status (the control socket's answer) says whether the broker is
// connected, and follows it going away and coming back; the published
// status never carries it.
func TestStatusSaysBrokerConnected(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{})
	tb := devicetest.New(t, devicetest.Options{Broker: b.URL})
	obs := observe(t, b.URL)
	runDevice(t, tb)
	link := func(want bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		var st ota.Status
		var err error
		for time.Now().Before(deadline) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			st, err = control.Client{Path: tb.Cfg.ControlSocket}.Status(ctx)
			cancel()
			if err == nil && st.Broker != nil && st.Broker.URL == b.URL && st.Broker.Connected == want {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("status broker %+v (err %v), want connected=%v", st.Broker, err, want)
	}
	link(true)
	if st := obs.waitStatus(t, "published", func(ota.Status) bool { return true }); st.Broker != nil {
		t.Errorf("published status carries the broker link: %+v", st.Broker)
	}
	b.Stop()
	link(false)
	b.Restart()
	link(true)
}
