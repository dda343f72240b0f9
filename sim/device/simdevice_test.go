package device_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/device/config"
	"github.com/otad/otad/fleetview"
	"github.com/otad/otad/internal/testkit/signer"
	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/sim/demo"
	"github.com/otad/otad/sim/device"
)

func pubKey(t *testing.T) []byte {
	t.Helper()
	s, err := signer.New()
	if err != nil {
		t.Fatal(err)
	}
	return s.PublicKeyPEM
}

func TestLayout(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "gw-01")
	pub := pubKey(t)
	off := false
	var got device.Paths
	p, cfg, err := device.Layout(device.Spec{
		ID: "gw-01", Dir: dir, Compatible: "otad,demo-sim", Broker: "mqtt://127.0.0.1:1883", Groups: []string{"demo"},
		SlotSize: 1 << 20, Factory: strings.NewReader("factory image"), TrustedKey: pub, CommitWindow: 6 * time.Second,
		HealthCommand: func(p device.Paths) []string { got = p; return []string{"/bin/health", p.EnvFile} },
		RebootPolicy:  "manual", Readback: &off,
	})
	if err != nil {
		t.Fatal(err)
	}
	// The config on disk is the one returned.
	onDisk, err := config.Load(filepath.Join(dir, "otad.toml"), "")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(onDisk, cfg) {
		t.Fatalf("written config %+v\ndiffers from %+v", onDisk, cfg)
	}
	want := device.Paths{Dir: dir, SlotA: filepath.Join(dir, "slotA.img"), SlotB: filepath.Join(dir, "slotB.img"),
		EnvFile: filepath.Join(dir, "bootenv.json"), StateDir: filepath.Join(dir, "state"), KeysDir: filepath.Join(dir, "keys.d"),
		Socket: filepath.Join(dir, "otad.sock"), Config: filepath.Join(dir, "otad.toml"), Log: filepath.Join(dir, "otad.log")}
	if p != want || got != want {
		t.Fatalf("paths %+v (health command saw %+v), want %+v", p, got, want)
	}
	switch {
	case cfg.DeviceID != "gw-01" || cfg.Compatible != "otad,demo-sim" || cfg.Bootloader.Type != "sim" || cfg.Bootloader.Attempts != device.Attempts ||
		cfg.Bootloader.EnvFile != want.EnvFile || cfg.Slots.A != want.SlotA || cfg.Slots.B != want.SlotB || cfg.StateDir != want.StateDir:
		t.Fatalf("config %+v", cfg)
	case cfg.MQTT.Broker != "mqtt://127.0.0.1:1883" || !reflect.DeepEqual(cfg.MQTT.Groups, []string{"demo"}):
		t.Fatalf("mqtt %+v", cfg.MQTT)
	case !reflect.DeepEqual(cfg.Commit.HealthCommand, []string{"/bin/health", want.EnvFile}) || cfg.Commit.Window.Duration != 6*time.Second:
		t.Fatalf("commit %+v", cfg.Commit)
	case !reflect.DeepEqual(cfg.Download.Schemes, []string{"http"}) || cfg.Download.Retries != 3 || cfg.Download.Backoff.Duration != 200*time.Millisecond:
		t.Fatalf("download %+v", cfg.Download)
	case cfg.Reboot.Policy != "manual" || cfg.Slots.Readback == nil || *cfg.Slots.Readback:
		t.Fatalf("reboot %+v, readback %v", cfg.Reboot, cfg.Slots.Readback)
	}
	for path, head := range map[string][]byte{want.SlotA: []byte("factory image\x00"), want.SlotB: {0, 0, 0}} {
		b, err := os.ReadFile(path)
		if err != nil || len(b) != 1<<20 || !bytes.HasPrefix(b, head) {
			t.Errorf("%s: %d bytes, starts %q (%v)", path, len(b), b[:min(len(b), 20)], err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(cfg.Trust.KeysDir, "release.pub")); err != nil || !bytes.Equal(b, pub) {
		t.Errorf("trusted key: %v", err)
	}
}

// Without a broker, commit window or health command, the device works
// locally with otad's defaults.
func TestLayoutDefaults(t *testing.T) {
	_, cfg, err := device.Layout(device.Spec{ID: "d", Dir: t.TempDir(), Compatible: "c", SlotSize: 4096, TrustedKey: []byte("k")})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MQTT.Broker != "" || len(cfg.Commit.HealthCommand) != 0 || cfg.Commit.Window.Duration != 5*time.Minute ||
		cfg.Reboot.Policy != "immediate" || cfg.Slots.Readback == nil || !*cfg.Slots.Readback {
		t.Fatalf("config %+v", cfg)
	}
}

func TestLayoutErrors(t *testing.T) {
	base := device.Spec{ID: "gw-01", Compatible: "c", Broker: "mqtt://127.0.0.1:1", SlotSize: 1 << 20,
		Factory: bytes.NewReader(make([]byte, 4096)), TrustedKey: []byte("x")}
	tests := []struct {
		name   string
		change func(*device.Spec)
		want   string
	}{
		{"bad id", func(s *device.Spec) { s.ID = "a/b" }, "bad ID"},
		{"empty id", func(s *device.Spec) { s.ID = "" }, "bad ID"},
		{"factory image too big", func(s *device.Spec) { s.Factory = bytes.NewReader(make([]byte, 2<<20)) }, "larger than the slot"},
		{"no compatible", func(s *device.Spec) { s.Compatible = "" }, "compatible"},
		{"bad group", func(s *device.Spec) { s.Groups = []string{"a+b"} }, "mqtt.groups"},
		{"bad policy", func(s *device.Spec) { s.RebootPolicy = "later" }, "reboot.policy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := base
			s.Dir = t.TempDir()
			tt.change(&s)
			if _, _, err := device.Layout(s); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v, want one naming %q", err, tt.want)
			}
		})
	}
}

// A device on an embedded broker comes up, publishes its status and stops
// cleanly with its context.
func TestRunOnBroker(t *testing.T) {
	b, err := demo.StartBroker(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	d, err := device.New(device.Spec{ID: "gw-07", Dir: t.TempDir(), Compatible: "c", Broker: b.URL,
		SlotSize: 1 << 20, TrustedKey: pubKey(t), CommitWindow: time.Second}, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fleet := fleetview.New("")
	go fleet.Watch(ctx, mqtt.Config{Broker: b.URL}, nil)
	devCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(devCtx) }()
	for len(fleet.Ready([]string{"gw-07"})) != 0 {
		select {
		case <-ctx.Done():
			t.Fatal("device did not come up")
		case <-time.After(20 * time.Millisecond):
		}
	}
	st, _ := fleet.Status("gw-07")
	if st.Device != "gw-07" || st.BootedSlot != "A" || st.AgentVersion != "" {
		t.Fatalf("status %+v", st)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if d.Boots() != 1 || d.Err() != nil {
		t.Fatalf("boots %d, err %v", d.Boots(), d.Err())
	}
	if log, err := os.ReadFile(d.Paths.Log); err != nil || !strings.Contains(string(log), "otad running") {
		t.Fatalf("device log: %v\n%s", err, log)
	}
}
