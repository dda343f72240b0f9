package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/otad/otad/internal/config"
	"github.com/otad/otad/internal/daemon"
	"github.com/otad/otad/internal/statelock"
)

// DeviceSpec describes one simulated device.
type DeviceSpec struct {
	ID         string
	Dir        string // created; holds the slots, state, boot env, trust dir, config and log
	Compatible string
	Broker     string // MQTT broker URL
	Groups     []string
	SlotSize   int64
	Factory    ImageSpec // what slot A holds at first
	TrustedKey []byte    // PEM public key, the device's only trusted key
	// HealthCommand builds the commit health check's argv from the device's
	// boot env file and slot paths.
	HealthCommand func(HealthArgs) []string
	CommitWindow  time.Duration
	AgentVersion  string
}

// Device is a simulated device: a real agent (internal/daemon) on file-backed
// slots with the sim bootloader, started again after every simulated reboot.
type Device struct {
	ID      string
	Dir     string
	Config  *config.Config
	LogFile string
	version string

	mu      sync.Mutex
	boots   int
	lastErr error
}

// NewDevice lays out the device's files and writes its otad.toml.
func NewDevice(s DeviceSpec) (*Device, error) {
	if s.ID == "" || strings.ContainsAny(s.ID, `/\+#`) {
		return nil, fmt.Errorf("demo device: bad ID %q", s.ID)
	}
	if s.CommitWindow <= 0 { // a zero in the config would mean the 5 minute default
		return nil, fmt.Errorf("demo device %s: commit.window %v: want a positive duration", s.ID, s.CommitWindow)
	}
	if s.Factory.Size > s.SlotSize {
		return nil, fmt.Errorf("demo device %s: factory image (%d bytes) larger than the slot (%d)", s.ID, s.Factory.Size, s.SlotSize)
	}
	keysDir := filepath.Join(s.Dir, "keys.d")
	if err := os.MkdirAll(keysDir, 0o755); err != nil {
		return nil, fmt.Errorf("demo device %s: %w", s.ID, err)
	}
	if err := os.WriteFile(filepath.Join(keysDir, "release.pub"), s.TrustedKey, 0o644); err != nil {
		return nil, fmt.Errorf("demo device %s: trusted key: %w", s.ID, err)
	}
	slots := map[string]string{"A": filepath.Join(s.Dir, "slotA.img"), "B": filepath.Join(s.Dir, "slotB.img")}
	if err := WriteImageFile(slots["A"], s.Factory); err != nil {
		return nil, fmt.Errorf("demo device %s: slot A: %w", s.ID, err)
	}
	for _, name := range []string{"A", "B"} {
		// Sparse: the slot's size is what the offer check compares against.
		if err := truncateNew(slots[name], s.SlotSize, name == "B"); err != nil {
			return nil, fmt.Errorf("demo device %s: slot %s: %w", s.ID, name, err)
		}
	}
	env := filepath.Join(s.Dir, "bootenv.json")
	const attempts = 3
	var health []string
	if s.HealthCommand != nil {
		health = s.HealthCommand(HealthArgs{EnvFile: env, Attempts: attempts, Slots: slots})
	}
	path := filepath.Join(s.Dir, "otad.toml")
	toml := fmt.Sprintf(`# A simulated device of otactl demo (SPEC §11).
device_id = %s
compatible = %s
state_dir = %s
control_socket = %s

[mqtt]
broker = %s
groups = %s

[trust]
keys_dir = %s

[slots]
A = %s
B = %s

[bootloader]
type = "sim"
env_file = %s
attempts = %d

[download]
schemes = ["http"]
retries = 3
backoff = "200ms"
max_backoff = "2s"

[commit]
health_command = %s
window = %s

[reboot]
policy = "immediate"
`, q(s.ID), q(s.Compatible), q(filepath.Join(s.Dir, "state")), q(filepath.Join(s.Dir, "otad.sock")),
		q(s.Broker), q(s.Groups), q(keysDir), q(slots["A"]), q(slots["B"]), q(env), attempts,
		q(health), q(s.CommitWindow.String()))
	if err := os.WriteFile(path, []byte(toml), 0o644); err != nil {
		return nil, fmt.Errorf("demo device %s: %w", s.ID, err)
	}
	cfg, err := config.Parse([]byte(toml), path, "")
	if err != nil {
		return nil, fmt.Errorf("demo device %s: %w", s.ID, err)
	}
	return &Device{ID: s.ID, Dir: s.Dir, Config: cfg, LogFile: filepath.Join(s.Dir, "otad.log"), version: s.AgentVersion}, nil
}

// q renders a string or a string list as TOML: JSON's escapes are TOML's.
func q(v any) string {
	if l, ok := v.([]string); ok && l == nil {
		v = []string{}
	}
	b, _ := json.Marshal(v) // strings and string lists always marshal
	return string(b)
}

// truncateNew sizes path to size, creating it when create is set.
func truncateNew(path string, size int64, create bool) error {
	flag := os.O_WRONLY
	if create {
		flag |= os.O_CREATE | os.O_EXCL
	}
	f, err := os.OpenFile(path, flag, 0o600)
	if err != nil {
		return err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Boots is how many times the agent has started (one more per simulated reboot).
func (d *Device) Boots() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.boots
}

// Err is the last error the agent stopped with, if any.
func (d *Device) Err() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lastErr
}

// restartPause is how long a failed agent waits before it starts again.
const restartPause = time.Second

// Run runs the device until ctx ends, as systemd runs otad: under the state
// lock, started again after each simulated reboot (daemon.Run returns nil)
// and, after a pause, after an error. Its log goes to d.LogFile.
func (d *Device) Run(ctx context.Context) error {
	f, err := os.OpenFile(d.LogFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("demo device %s: log: %w", d.ID, err)
	}
	defer f.Close()
	log := slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelInfo})).With("device", d.ID)
	for ctx.Err() == nil {
		err := d.runOnce(ctx, log)
		if err == nil {
			continue // a simulated reboot: power on again
		}
		log.Error("agent stopped", "err", err)
		d.mu.Lock()
		d.lastErr = err
		d.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(restartPause):
		}
	}
	return nil
}

// lockWait bounds how long a restarting agent waits for its state lock.
const lockWait = 5 * time.Second

// acquire takes the state lock, waiting a little while it is busy. The lock
// is a flock, and this process forks health checks for every device: a
// child between fork and exec holds a copy of every descriptor, so the lock a
// rebooting agent just released can stay held for a moment. One device per
// process, as on real hardware, never sees that.
func (d *Device) acquire(ctx context.Context) (*statelock.Lock, error) {
	deadline := time.Now().Add(lockWait)
	for {
		lock, err := statelock.Acquire(d.Config.StateDir)
		if err == nil || !errors.Is(err, statelock.ErrBusy) || time.Now().After(deadline) {
			return lock, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (d *Device) runOnce(ctx context.Context, log *slog.Logger) error {
	lock, err := d.acquire(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopping
		}
		return err
	}
	d.mu.Lock()
	d.boots++
	d.mu.Unlock()
	log.Info("power on")
	err = daemon.Run(ctx, d.Config, daemon.Options{AgentVersion: d.version, Logger: log, NoControlSocket: true})
	if rerr := lock.Release(); rerr != nil {
		err = errors.Join(err, fmt.Errorf("state lock: %w", rerr))
	}
	return err
}
