package demo

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/fleetview"
	"github.com/otad/otad/internal/config"
	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/verify"
)

func pubKey(t *testing.T) []byte {
	t.Helper()
	k, err := verify.GenerateKey(verify.KeyECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := verify.MarshalPublicKeyPEM(k.Public())
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

func TestNewDevice(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "gw-01")
	pub := pubKey(t)
	var got HealthArgs
	d, err := NewDevice(DeviceSpec{
		ID: "gw-01", Dir: dir, Compatible: "otad,demo-sim", Broker: "mqtt://127.0.0.1:1883", Groups: []string{"demo"},
		SlotSize: 1 << 20, Factory: ImageSpec{Version: "1.0.0", Size: 64 << 10}, TrustedKey: pub, CommitWindow: 6 * time.Second,
		HealthCommand: func(a HealthArgs) []string { got = a; return []string{"/bin/health", a.EnvFile} },
	})
	if err != nil {
		t.Fatal(err)
	}
	// The config on disk is the one the agent runs with.
	cfg, err := config.Load(filepath.Join(dir, "otad.toml"), "")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cfg, d.Config) {
		t.Fatalf("written config %+v\ndiffers from %+v", cfg, d.Config)
	}
	want := HealthArgs{EnvFile: filepath.Join(dir, "bootenv.json"), Attempts: 3,
		Slots: map[string]string{"A": filepath.Join(dir, "slotA.img"), "B": filepath.Join(dir, "slotB.img")}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("health args %+v, want %+v", got, want)
	}
	switch {
	case cfg.DeviceID != "gw-01" || cfg.Compatible != "otad,demo-sim" || cfg.Bootloader.Type != "sim" ||
		cfg.Bootloader.EnvFile != want.EnvFile || cfg.Slots.A != want.Slots["A"] || cfg.Slots.B != want.Slots["B"]:
		t.Fatalf("config %+v", cfg)
	case cfg.MQTT.Broker != "mqtt://127.0.0.1:1883" || !reflect.DeepEqual(cfg.MQTT.Groups, []string{"demo"}):
		t.Fatalf("mqtt %+v", cfg.MQTT)
	case !reflect.DeepEqual(cfg.Commit.HealthCommand, []string{"/bin/health", want.EnvFile}) || cfg.Commit.Window.Duration != 6*time.Second:
		t.Fatalf("commit %+v", cfg.Commit)
	case !reflect.DeepEqual(cfg.Download.Schemes, []string{"http"}) || cfg.Reboot.Policy != "immediate":
		t.Fatalf("download %+v reboot %+v", cfg.Download, cfg.Reboot)
	}
	for slot, head := range map[string]string{"A": GoodMarker + " version=1.0.0\n", "B": "\x00\x00\x00"} {
		b, err := os.ReadFile(want.Slots[slot])
		if err != nil || len(b) != 1<<20 || !strings.HasPrefix(string(b), head) {
			t.Errorf("slot %s: %d bytes, starts %q (%v)", slot, len(b), b[:min(len(b), 20)], err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(cfg.Trust.KeysDir, "release.pub")); err != nil || string(b) != string(pub) {
		t.Errorf("trusted key: %v", err)
	}
}

func TestNewDeviceErrors(t *testing.T) {
	base := DeviceSpec{ID: "gw-01", Compatible: "c", Broker: "mqtt://127.0.0.1:1", SlotSize: 1 << 20,
		Factory: ImageSpec{Version: "1", Size: 4096}, TrustedKey: []byte("x"), CommitWindow: time.Second}
	tests := []struct {
		name   string
		change func(*DeviceSpec)
		want   string
	}{
		{"bad id", func(s *DeviceSpec) { s.ID = "a/b" }, "bad ID"},
		{"empty id", func(s *DeviceSpec) { s.ID = "" }, "bad ID"},
		{"factory image too big", func(s *DeviceSpec) { s.Factory.Size = 2 << 20 }, "larger than the slot"},
		{"no compatible", func(s *DeviceSpec) { s.Compatible = "" }, "compatible"},
		{"bad group", func(s *DeviceSpec) { s.Groups = []string{"a+b"} }, "mqtt.groups"},
		{"no commit window", func(s *DeviceSpec) { s.CommitWindow = 0 }, "commit.window"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := base
			s.Dir = t.TempDir()
			tt.change(&s)
			if _, err := NewDevice(s); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v, want one naming %q", err, tt.want)
			}
		})
	}
}

// A device on the embedded broker comes up, publishes its status and stops
// cleanly with its context.
func TestDeviceRunsOnBroker(t *testing.T) {
	b, err := StartBroker(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	d, err := NewDevice(DeviceSpec{ID: "gw-07", Dir: t.TempDir(), Compatible: "c", Broker: b.URL,
		SlotSize: 1 << 20, Factory: ImageSpec{Version: "1", Size: 4096}, TrustedKey: pubKey(t), CommitWindow: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr := fleetview.New("")
	go tr.Watch(ctx, mqtt.Config{Broker: b.URL}, nil)
	devCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(devCtx) }()
	for len(tr.Ready([]string{"gw-07"})) != 0 {
		select {
		case <-ctx.Done():
			t.Fatal("device did not come up")
		case <-time.After(20 * time.Millisecond):
		}
	}
	st, _ := tr.Status("gw-07")
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
	if log, err := os.ReadFile(d.LogFile); err != nil || !strings.Contains(string(log), "otad running") {
		t.Fatalf("device log: %v\n%s", err, log)
	}
}
