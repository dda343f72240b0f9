package operator

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/internal/testkit/testtool"
	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/ota"
)

// retainedOn returns the retained message on topic as a fresh subscriber sees it (ok false: none).
func retainedOn(t *testing.T, broker, topic string) (payload string, ok bool) {
	t.Helper()
	got := make(chan paho.Message, 1)
	c := mosquittotest.Client(t, broker, "test-reader")
	defer c.Disconnect(100) // the next call connects as test-reader again
	mosquittotest.Subscribe(t, c, topic, func(_ paho.Client, m paho.Message) {
		select {
		case got <- m:
		default:
		}
	})
	select {
	case m := <-got:
		if !m.Retained() || m.Qos() != 1 {
			t.Errorf("%s: retained %v QoS %d, want a retained QoS 1 message", topic, m.Retained(), m.Qos())
		}
		return string(m.Payload()), true
	case <-time.After(time.Second):
		return "", false
	}
}

// signedEnvelope signs a 64 KiB image with a fresh key (otactl keygen + sign) and
// writes the envelope to a file; url "" offers the image file itself. It returns the
// envelope's path and the directory holding the image and release.key/.pub.
func signedEnvelope(t *testing.T, version, compatible, url string) (env, dir string) {
	t.Helper()
	dir = t.TempDir()
	img := filepath.Join(dir, "rootfs.img")
	makeImage(t, img, 64<<10)
	if url == "" {
		url = "file://" + img
	}
	mustRun(t, "keygen", filepath.Join(dir, "release"))
	r := mustRun(t, "sign", "--key", filepath.Join(dir, "release.key"), "--image", img, "--version", version,
		"--compatible", compatible, "--url", url)
	return writeEnvelope(t, dir, r.stdout), dir
}

func TestPublishCommand(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{})
	env, _ := signedEnvelope(t, "4.2.0", "acme,gw-v2", "https://updates.example.com/rootfs.img")
	want, err := os.ReadFile(env)
	if err != nil {
		t.Fatal(err)
	}

	mustRun(t, "publish", "--broker", b.URL, "--device", "gw-1", env)
	if got, ok := retainedOn(t, b.URL, "ota/devices/gw-1/desired"); !ok || got != string(want) {
		t.Errorf("device desired topic: retained %v, payload %d bytes, want the envelope (%d bytes)", ok, len(got), len(want))
	}
	mustRun(t, "publish", "--broker", b.URL, "--prefix", "fleet", "--group", "canary", env)
	if got, ok := retainedOn(t, b.URL, "fleet/groups/canary/desired"); !ok || got != string(want) {
		t.Errorf("group desired topic: retained %v, payload %d bytes", ok, len(got))
	}
	mustRun(t, "publish", "--broker", b.URL, "--device", "gw-1", "--clear")
	if got, ok := retainedOn(t, b.URL, "ota/devices/gw-1/desired"); ok {
		t.Errorf("after --clear a retained offer remains: %q", got)
	}

	junk := filepath.Join(t.TempDir(), "junk.json")
	if err := os.WriteFile(junk, []byte(`{"hello":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"no broker", []string{"--device", "gw-1", env}, ota.ExitUsage, "missing --broker"},
		{"no target", []string{"--broker", b.URL, env}, ota.ExitUsage, "exactly one of --device and --group"},
		{"both targets", []string{"--broker", b.URL, "--device", "a", "--group", "g", env}, ota.ExitUsage, "exactly one of"},
		{"wildcard device", []string{"--broker", b.URL, "--device", "gw/+", env}, ota.ExitUsage, `--device: not a valid name: "gw/+"`},
		{"dotted device", []string{"--broker", b.URL, "--device", "gw.1", env}, ota.ExitUsage, `--device: not a valid name: "gw.1"`},
		{"group with a space", []string{"--broker", b.URL, "--group", "eu prod", env}, ota.ExitUsage, `--group: not a valid name`},
		{"prefix with levels", []string{"--broker", b.URL, "--prefix", "acme/ota", "--group", "g", env}, ota.ExitUsage, `--prefix: not a valid name`},
		{"no file", []string{"--broker", b.URL, "--device", "gw-1"}, ota.ExitUsage, "exactly one envelope FILE"},
		{"clear with file", []string{"--broker", b.URL, "--device", "gw-1", "--clear", env}, ota.ExitUsage, "--clear takes no FILE"},
		{"missing file", []string{"--broker", b.URL, "--device", "gw-1", "/nonexistent/offer.json"}, ota.ExitFailure, "/nonexistent/offer.json"},
		{"not an envelope", []string{"--broker", b.URL, "--device", "gw-1", junk}, ota.ExitRefused, "junk.json"},
		{"bad broker URL", []string{"--broker", "http://x", "--device", "gw-1", env}, ota.ExitFailure, "mqtt.broker"},
		{"broker down", []string{"--broker", "mqtt://127.0.0.1:1", "--device", "gw-1", "--timeout", "3s", env}, ota.ExitFailure, "connect to mqtt://127.0.0.1:1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := otactl(t, append([]string{"publish"}, tt.args...)...)
			if r.code != tt.code || !strings.Contains(r.stderr, tt.msg) {
				t.Errorf("exit %d, stderr %q; want exit %d mentioning %q", r.code, r.stderr, tt.code, tt.msg)
			}
		})
	}
	if got, ok := retainedOn(t, b.URL, "ota/devices/gw-1/desired"); ok {
		t.Errorf("a refused publish left %q retained", got)
	}
}

// Status snapshots of two devices, as they publish them (docs/contract/mqtt.md).
var (
	statusGW1 = snapshot(ota.Status{Device: "gw-1", Seq: 913, BootID: "b", State: ota.Downloading, BootedSlot: "A",
		Slots:      map[ota.Slot]ota.SlotStatus{"A": {Version: "4.1.0", SHA256: "aa", SecurityVersion: 6}},
		Target:     &ota.TargetStatus{ID: "rel-42", Version: "4.2.0", SHA256: "bb", BytesDone: 123, BytesTotal: 456},
		LastResult: &ota.Outcome{ID: "rel-41", Result: ota.ResultFailed, Code: "hash_mismatch", Message: "m"}})
	statusGW2 = snapshot(ota.Status{Device: "gw-2", Seq: 7, State: ota.Idle, BootedSlot: "B",
		Slots:      map[ota.Slot]ota.SlotStatus{"A": {Version: "4.1.0"}, "B": {Version: "4.2.0"}},
		LastResult: &ota.Outcome{ID: "rel-42", Result: ota.ResultSuccess}})
)

func snapshot(st ota.Status) string {
	b, err := json.Marshal(st)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func TestStatusCommand(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := mqtt.Config{Broker: b.URL}
	for topic, payload := range map[string]string{
		"ota/devices/gw-1/status": statusGW1,
		"ota/devices/gw-1/online": `{"online":true}`,
		"ota/devices/gw-2/status": statusGW2,
		"ota/devices/gw-2/online": `{"online":false}`,
		"ota/devices/gw-3/status": `{"seq": "not a number"`,
	} {
		if err := mqtt.PublishRetained(ctx, cfg, topic, []byte(payload)); err != nil {
			t.Fatal(err)
		}
	}

	r := mustRun(t, "status", "--broker", b.URL, "--timeout", "1s")
	table, _, _ := strings.Cut(r.stdout, "\n\n") // the totals follow
	lines := strings.Split(table, "\n")
	want := []string{
		`^DEVICE\s+ONLINE\s+STATE\s+RUNNING\s+BOOTED\s+SLOT A\s+SLOT B\s+TARGET\s+LAST RESULT\s+SEQ$`,
		// rel-41's result is not rel-42's, which is downloading: not shown.
		`^gw-1\s+yes\s+downloading\s+4\.1\.0\s+A\s+4\.1\.0\s+-\s+4\.2\.0 26%\s+-\s+913$`,
		`^gw-2\s+no\s+idle\s+4\.2\.0\s+B\s+4\.1\.0\s+4\.2\.0\s+-\s+success\s+7$`,
		`^gw-3\s+\?\s+\(bad status\)\s+-\s+-\s+-\s+-\s+-\s+-\s+-$`,
	}
	if len(lines) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(want), r.stdout)
	}
	for i, re := range want {
		if !regexp.MustCompile(re).MatchString(lines[i]) {
			t.Errorf("line %d = %q, want /%s/", i, lines[i], re)
		}
	}

	// An empty broker: header only, and a note.
	empty := mosquittotest.Start(t, mosquittotest.Options{})
	r = mustRun(t, "status", "--broker", empty.URL, "--timeout", "500ms")
	if r.stdout != "DEVICE  ONLINE  STATE  RUNNING  BOOTED  SLOT A  SLOT B  TARGET  LAST RESULT  SEQ\n\n0 devices\n" || !strings.Contains(r.stderr, "no device status") {
		t.Errorf("empty fleet: stdout %q stderr %q", r.stdout, r.stderr)
	}
	if r := otactl(t, "status", "--broker", "mqtt://127.0.0.1:1", "--timeout", "1s"); r.code != ota.ExitFailure {
		t.Errorf("broker down: exit %d, want %d", r.code, ota.ExitFailure)
	}
	if r := otactl(t, "status", "--timeout", "1s"); r.code != ota.ExitUsage {
		t.Errorf("no --broker: exit %d, want %d", r.code, ota.ExitUsage)
	}
}

func TestStatusWatch(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{})
	cfg := mqtt.Config{Broker: b.URL}
	pubCtx, cancelPub := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancelPub()
	if err := mqtt.PublishRetained(pubCtx, cfg, "ota/devices/gw-1/status", []byte(statusGW1)); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut testtool.Buffer
	code := make(chan int, 1)
	go func() { code <- Run(ctx, []string{"status", "--broker", b.URL, "--watch"}, &out, &errOut) }()

	waitOutput := func(what string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(out.String(), what) {
			if time.Now().After(deadline) {
				cancel()
				t.Fatalf("watch output lacks %q:\n%s\nstderr: %s", what, out.String(), errOut.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitOutput("downloading")
	// A device is live: progress (not retained) moves its bar and its TARGET column.
	progress := `{"device":"gw-1","id":"rel-42","sha256":"bb","bytes_done":228,"bytes_total":456,"bytes_per_second":12897485}`
	d, err := mqtt.Dial(mqtt.Config{Broker: b.URL, DeviceID: "gw-1"}, func(string, []byte) {})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(context.Background())
	deadline := time.Now().Add(10 * time.Second)
	for !d.Connected() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	// Progress may be dropped before the device's subscriptions settle: resend until seen.
	for i := 0; i < 50 && !strings.Contains(out.String(), "[##########..........]  50% 12.3 MiB/s"); i++ {
		d.PublishProgress([]byte(progress))
		time.Sleep(200 * time.Millisecond)
	}
	waitOutput("[##########..........]  50% 12.3 MiB/s")
	waitOutput("4.2.0 50%")
	waitOutput("yes") // the device's online message
	if strings.Contains(out.String(), "\x1b[") {
		t.Error("ANSI escapes written to a non-terminal")
	}
	cancel()
	select {
	case c := <-code:
		if c != ota.ExitOK {
			t.Errorf("watch ended with exit %d: %s", c, errOut.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("watch did not end on cancel")
	}
}

// A snapshot goes on collecting while answers still arrive after they were
// due (a loaded broker delivers late), and not much longer.
func TestWaitQuiet(t *testing.T) {
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	stop := time.Now().Add(time.Second)
	go func() {
		for time.Now().Before(stop) {
			last.Store(time.Now().UnixNano())
			time.Sleep(100 * time.Millisecond)
		}
	}()
	start := time.Now()
	waitQuiet(t.Context(), &last, 5*time.Second)
	if took := time.Since(start); took < time.Second || took > 3*time.Second {
		t.Errorf("waited %v: want until half a second after the last change at 1s", took)
	}
	start = time.Now()
	waitQuiet(t.Context(), &last, 5*time.Second)
	if took := time.Since(start); took > 200*time.Millisecond {
		t.Errorf("a quiet view waited %v", took)
	}
	last.Store(time.Now().Add(time.Hour).UnixNano()) // never quiet: the limit holds
	start = time.Now()
	waitQuiet(t.Context(), &last, 300*time.Millisecond)
	if took := time.Since(start); took > time.Second {
		t.Errorf("waited %v past a limit of 300ms", took)
	}
}
