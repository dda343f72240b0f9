package device

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"

	"github.com/otad/otad/device/config"
)

// Attempts is the sim bootloader's boot attempts per slot.
const Attempts = 3

// Spec describes one simulated device.
type Spec struct {
	ID         string
	Dir        string // created; holds the slots, state, boot env, trust dir, config and log
	Compatible string
	SlotSize   int64
	Factory    io.Reader // slot A's first bytes (the rest reads as zeros); nil: all zeros
	TrustedKey []byte    // PEM public key, the device's only trusted key
	Broker     string    // MQTT broker URL; empty: no [mqtt], the device works locally
	Brokers    []string  // the nodes of a clustered broker, instead of Broker ([mqtt] brokers)
	Groups     []string
	// Download paces fetching; the zero value is http, 3 retries, 200ms to 2s.
	Download config.Download
	// CommitWindow is [commit] window; 0 leaves otad's default.
	CommitWindow time.Duration
	// HealthCommand builds [commit] health_command from the device's paths; nil: none.
	HealthCommand func(Paths) []string
	RebootPolicy  string // "immediate" (default) or "manual"
	Readback      *bool  // [slots] readback; nil leaves otad's default (on)
}

// Paths are where a device's files are.
type Paths struct {
	Dir      string
	SlotA    string
	SlotB    string
	EnvFile  string // the sim bootloader's state, the booted slot with it
	StateDir string
	KeysDir  string
	Socket   string
	Config   string // otad.toml
	Log      string // the agent's log when Run runs it
}

// Paths lays the device's files out under s.Dir.
func (s Spec) Paths() Paths {
	at := func(name string) string { return filepath.Join(s.Dir, name) }
	return Paths{Dir: s.Dir, SlotA: at("slotA.img"), SlotB: at("slotB.img"), EnvFile: at("bootenv.json"),
		StateDir: at("state"), KeysDir: at("keys.d"), Socket: at("otad.sock"), Config: at("otad.toml"), Log: at("otad.log")}
}

// Config renders the device's otad.toml (docs/contract/config.md). Only what the spec sets
// is written; the rest is otad's default.
func (s Spec) Config() ([]byte, error) {
	p := s.Paths()
	dl := s.Download
	if dl.Schemes == nil {
		dl.Schemes = []string{"http"}
	}
	if dl.Retries == 0 && dl.Backoff.Duration == 0 && dl.MaxBackoff.Duration == 0 {
		dl.Retries, dl.Backoff.Duration, dl.MaxBackoff.Duration = 3, 200*time.Millisecond, 2*time.Second
	}
	download := map[string]any{"schemes": dl.Schemes, "retries": dl.Retries,
		"backoff": dl.Backoff.String(), "max_backoff": dl.MaxBackoff.String()}
	if dl.CAFile != "" {
		download["ca_file"] = dl.CAFile
	}
	policy := s.RebootPolicy
	if policy == "" {
		policy = "immediate"
	}
	slots := map[string]any{"A": p.SlotA, "B": p.SlotB}
	if s.Readback != nil {
		slots["readback"] = *s.Readback
	}
	commit := map[string]any{}
	if s.CommitWindow > 0 {
		commit["window"] = s.CommitWindow.String()
	}
	if s.HealthCommand != nil {
		commit["health_command"] = s.HealthCommand(p)
	}
	doc := map[string]any{
		"device_id": s.ID, "compatible": s.Compatible, "state_dir": p.StateDir, "control_socket": p.Socket,
		"trust":      map[string]any{"keys_dir": p.KeysDir},
		"slots":      slots,
		"bootloader": map[string]any{"type": "sim", "env_file": p.EnvFile, "attempts": Attempts},
		"download":   download,
		"commit":     commit,
		"reboot":     map[string]any{"policy": policy},
	}
	if s.Broker != "" || len(s.Brokers) > 0 {
		groups := s.Groups
		if groups == nil {
			groups = []string{}
		}
		m := map[string]any{"groups": groups}
		if len(s.Brokers) > 0 {
			m["brokers"] = s.Brokers
		} else {
			m["broker"] = s.Broker
		}
		doc["mqtt"] = m
	}
	b, err := toml.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("simulated device %s: config: %w", s.ID, err)
	}
	return append([]byte("# A simulated device (sim/device).\n"), b...), nil
}

// Layout creates the device's files under s.Dir and returns its config as
// otad reads it from there.
func Layout(s Spec) (Paths, *config.Config, error) {
	p := s.Paths()
	fail := func(what string, err error) (Paths, *config.Config, error) {
		return p, nil, fmt.Errorf("simulated device %s: %s: %w", s.ID, what, err)
	}
	if err := checkID(s.ID); err != nil {
		return p, nil, err
	}
	b, err := s.Config()
	if err != nil {
		return p, nil, err
	}
	// Check the config before anything is written: a bad spec leaves no files.
	if _, err := config.Parse(b, p.Config, ""); err != nil {
		return fail("config", err)
	}
	if err := os.MkdirAll(p.KeysDir, 0o755); err != nil {
		return fail("trust dir", err)
	}
	if err := os.WriteFile(filepath.Join(p.KeysDir, "release.pub"), s.TrustedKey, 0o644); err != nil {
		return fail("trusted key", err)
	}
	if err := writeSlot(p.SlotA, s.Factory, s.SlotSize); err != nil {
		return fail("slot A", err)
	}
	if err := writeSlot(p.SlotB, nil, s.SlotSize); err != nil {
		return fail("slot B", err)
	}
	if err := os.WriteFile(p.Config, b, 0o644); err != nil {
		return fail("config", err)
	}
	cfg, err := config.Load(p.Config, "")
	if err != nil {
		return fail("config", err)
	}
	return p, cfg, nil
}

// ErrFactoryTooLarge is a factory image larger than its slot.
var ErrFactoryTooLarge = errors.New("factory image larger than the slot")

// writeSlot creates a slot file of size bytes that starts with what r holds;
// the rest is sparse, so a slot's size costs no disk.
func writeSlot(path string, r io.Reader, size int64) (err error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	if r != nil {
		// One byte more than fits tells a too large image.
		n, err := io.Copy(f, io.LimitReader(r, size+1))
		if err != nil {
			return err
		}
		if n > size {
			return fmt.Errorf("%w (%d bytes)", ErrFactoryTooLarge, size)
		}
	}
	return f.Truncate(size)
}

func checkID(id string) error {
	if id == "" || strings.ContainsAny(id, `/\+#`) {
		return fmt.Errorf("simulated device: bad ID %q", id)
	}
	return nil
}
