// Package device assembles an agent from a configuration: the concrete
// bootloader, slot writer, offer checks, health check and reboot behind the
// agent's interfaces. cmd/otad and the demo both build devices through it.
package device

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"time"

	"github.com/otad/otad/agent"
	"github.com/otad/otad/bootctl"
	"github.com/otad/otad/bootctl/grub"
	"github.com/otad/otad/bootctl/sim"
	"github.com/otad/otad/bootctl/uboot"
	"github.com/otad/otad/internal/config"
	"github.com/otad/otad/slots"
	"github.com/otad/otad/tlsfiles"
	"github.com/otad/otad/verify"

	"github.com/otad/otad/ota"
)

// OfferSettle is how long network offers gather before the newest is taken:
// the retained offers of all desired topics arrive together on connect.
const OfferSettle = 200 * time.Millisecond

// BootIDFile is where Linux exposes the current boot's random ID.
const BootIDFile = "/proc/sys/kernel/random/boot_id"

// Options tune the assembly for tests and the demo.
type Options struct {
	AgentVersion string
	Logger       *slog.Logger
	Publishers   []agent.Publisher
	Clock        agent.Clock
	// Rebooter replaces the default (sim: apply the boot rules and end Run;
	// others: systemctl reboot).
	Rebooter agent.Rebooter
	// Retry overrides the download retry timing (tests).
	Retry *slots.Retry
	// Interrupt is the agent's fault injection hook (crash tests).
	Interrupt func(agent.Effect) error
	// Heartbeat is called from the agent loop every HeartbeatEvery.
	Heartbeat      func()
	HeartbeatEvery time.Duration
}

// Device is an assembled agent and what it runs on.
type Device struct {
	Config     *config.Config
	Agent      *agent.Agent
	Bootloader bootctl.Bootloader
	Booted     ota.Slot
	BootID     string
	Keys       *Keys
}

// Open builds the device. The caller holds the state lock.
func Open(cfg *config.Config, opt Options) (*Device, error) {
	log := opt.Logger
	if log == nil {
		log = slog.Default()
	}
	d := &Device{Config: cfg}
	bl, booted, bootID, reboot, err := bootloader(cfg)
	if err != nil {
		return nil, err
	}
	d.Bootloader, d.Booted, d.BootID = bl, booted, bootID
	if opt.Rebooter != nil {
		reboot = opt.Rebooter
	}
	keys, err := LoadKeys(cfg.Trust.KeysDir, log)
	if err != nil {
		return nil, err
	}
	d.Keys = keys
	retry := slots.Retry{Attempts: cfg.Download.Retries, Base: cfg.Download.Backoff.Duration, Max: cfg.Download.MaxBackoff.Duration}
	if opt.Retry != nil {
		retry = *opt.Retry
	}
	devs := cfg.Slots.Devices()
	dl := cfg.Download
	tc, err := tlsfiles.Files{Section: "download", CAFile: dl.CAFile, CertFile: dl.CertFile, KeyFile: dl.KeyFile}.Config("")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.Path, err)
	}
	a, err := agent.New(agent.Config{
		DeviceID:     cfg.DeviceID,
		AgentVersion: opt.AgentVersion,
		Policy:       agent.Policy{RebootImmediately: cfg.Reboot.Policy == "immediate", MaxRestarts: 3},
		CommitWindow: cfg.Commit.Window.Duration,
		Logger:       log,
		Interrupt:    opt.Interrupt,
		OfferSettle:  OfferSettle,
		Heartbeat:    opt.Heartbeat, HeartbeatEvery: opt.HeartbeatEvery,
	}, agent.Deps{
		Store:      agent.Journal{Dir: cfg.StateDir},
		Bootloader: orderedBootloader{bl},
		Installer: &installer{devices: devs, booted: devs[booted], readback: *cfg.Slots.Readback, retry: retry,
			client: slots.NewHTTPClient(tc), schemes: dl.Schemes},
		Checker: &checker{keys: keys, devices: devs, clock: opt.Clock, policy: verify.Policy{
			DeviceID: cfg.DeviceID, Compatible: cfg.Compatible, Threshold: cfg.Trust.Threshold,
			ClockSkew: cfg.Trust.ClockSkew.Duration, Schemes: cfg.Download.Schemes,
		}},
		Rebooter:   reboot,
		Health:     health{argv: cfg.Commit.HealthCommand},
		Clock:      opt.Clock,
		Publishers: opt.Publishers,
	})
	if err != nil {
		return nil, err
	}
	d.Agent = a
	return d, nil
}

// Run runs the agent on the booted slot until ctx ends or the device reboots.
func (d *Device) Run(ctx context.Context) error { return d.Agent.Run(ctx, d.Booted, d.BootID) }

func bootloader(cfg *config.Config) (bootctl.Bootloader, ota.Slot, string, agent.Rebooter, error) {
	b := cfg.Bootloader
	if b.Type == "sim" {
		s, err := sim.Open(b.EnvFile, b.Attempts)
		if err != nil {
			return nil, "", "", nil, err
		}
		booted, err := s.Booted()
		if err != nil {
			return nil, "", "", nil, err
		}
		id, err := s.BootID()
		if err != nil {
			return nil, "", "", nil, err
		}
		return s, booted, id, SimReboot{Sim: s}, nil
	}
	var bl bootctl.Bootloader
	var err error
	switch b.Type {
	case "uboot":
		bl, err = uboot.Open(b.EnvConfig, b.Attempts)
	case "grub":
		bl, err = grub.Open(b.EnvFile, b.Attempts)
	default:
		err = fmt.Errorf("%s: bootloader.type: unknown %q", cfg.Path, b.Type)
	}
	if err != nil {
		return nil, "", "", nil, err
	}
	booted, err := slots.ReadBooted(cfg.Slots.Cmdline, cfg.Slots.Devices())
	if err != nil {
		return nil, "", "", nil, err
	}
	id, err := os.ReadFile(BootIDFile)
	if err != nil {
		return nil, "", "", nil, fmt.Errorf("boot id: %w", err)
	}
	return bl, booted, strings.TrimSpace(string(id)), SystemReboot{}, nil
}

// orderedBootloader gives the agent the boot order from the backend's state.
type orderedBootloader struct{ bootctl.Bootloader }

func (b orderedBootloader) Order(ctx context.Context) ([]ota.Slot, error) {
	st, err := b.State(ctx)
	if err != nil {
		return nil, err
	}
	return st.Order, nil
}

// SimReboot "reboots" a simulated device: the boot script's rules pick the
// next slot, and the agent ends as a real reboot would end it.
type SimReboot struct{ Sim *sim.Sim }

// Reboot applies the boot rules and ends Run.
func (r SimReboot) Reboot(context.Context) error {
	if _, err := r.Sim.Boot(); err != nil {
		return err
	}
	return agent.ErrRebooted
}

// SystemReboot asks systemd to reboot; systemd then stops the agent.
type SystemReboot struct{}

// Reboot runs `systemctl reboot`.
func (SystemReboot) Reboot(ctx context.Context) error {
	out, err := exec.CommandContext(ctx, "systemctl", "reboot").CombinedOutput()
	if err != nil {
		return fmt.Errorf("systemctl reboot: %w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// Keys is the trusted keyring, swapped whole when the trust directory changes.
type Keys struct {
	dir string
	log *slog.Logger
	cur atomic.Pointer[verify.Keyring]
}

// LoadKeys reads the trust directory; bad key files are logged and skipped.
func LoadKeys(dir string, log *slog.Logger) (*Keys, error) {
	k := &Keys{dir: dir, log: log}
	if err := k.Reload(); err != nil {
		return nil, err
	}
	return k, nil
}

// Reload re-reads the directory: a removed key stops being trusted.
func (k *Keys) Reload() error {
	kr, bad, err := verify.LoadKeyDir(k.dir)
	if err != nil {
		return fmt.Errorf("trust.keys_dir: %w", err)
	}
	for _, e := range bad {
		k.log.Warn("ignoring key file", "err", e)
	}
	k.cur.Store(kr)
	k.log.Info("trusted keys loaded", "dir", k.dir, "keys", kr.Len())
	return nil
}

// Keyring is the current keyring.
func (k *Keys) Keyring() *verify.Keyring { return k.cur.Load() }

type checker struct {
	keys    *Keys
	devices map[ota.Slot]string
	policy  verify.Policy
	clock   agent.Clock
}

func (c *checker) Check(raw []byte, f agent.Facts) (agent.Target, error) {
	now := time.Now().UTC()
	if c.clock != nil {
		now = c.clock.Now()
	}
	dev := c.devices[f.InactiveSlot]
	size, err := slots.DeviceSize(dev)
	if err != nil {
		return agent.Target{}, ota.Errorf(ota.CodeTooBigForSlot, "slot %s (%s): %w", f.InactiveSlot, dev, err)
	}
	off, err := verify.Check(raw, c.keys.Keyring(), c.policy, verify.Facts{
		Now: now, SecurityFloor: f.SecurityFloor, NewestIssuedAt: f.NewestIssuedAt, InactiveSlotSize: size,
	})
	if err != nil {
		var t agent.Target
		if ota.CodeOf(err).Authentic() {
			// Authentic and well formed: name the refused offer in the status.
			if env, e := verify.ParseEnvelope(raw); e == nil {
				if m, e := verify.ParseManifest(env.Manifest); e == nil {
					t = target(m)
				}
			}
		}
		if ota.CodeOf(err) == "" {
			err = ota.Wrap(ota.CodeBadEnvelope, err)
		}
		return t, err
	}
	return target(&off.Manifest), nil
}

func target(m *verify.Manifest) agent.Target {
	return agent.Target{
		ID: m.ID, Version: m.Version, SecurityVersion: m.SecurityVersion, IssuedAt: m.IssuedAt,
		Payload: agent.Payload{URL: m.Payload.URL, Compression: m.Payload.Compression, Size: m.Payload.Size,
			SHA256: m.Payload.SHA256, DownloadSize: m.Payload.DownloadSize},
	}
}

type installer struct {
	devices  map[ota.Slot]string
	booted   string
	readback bool
	retry    slots.Retry
	client   *http.Client
	schemes  []string
}

func (in *installer) Install(ctx context.Context, t agent.Target, progress func(bool, int64, int64)) error {
	err := slots.Write(ctx, slots.Job{
		URL: t.Payload.URL, Compression: t.Payload.Compression, Size: t.Payload.Size,
		SHA256: t.Payload.SHA256, DownloadSize: t.Payload.DownloadSize,
		Target: in.devices[t.Slot], Booted: in.booted, Readback: in.readback, Retry: in.retry,
		HTTPClient: in.client, Schemes: in.schemes,
		Progress: func(p slots.Progress) { progress(p.Phase == "verifying", p.BytesDone, p.BytesTotal) },
	})
	if err != nil && ota.CodeOf(err) == "" {
		return ota.Wrap(ota.CodeWriteFailed, err)
	}
	return err
}

// health runs the configured command until it passes or the commit window
// (the context) ends; no command means "the agent came up" is healthy enough.
type health struct{ argv []string }

// healthRetry is the pause between failed health checks within the window.
const healthRetry = 5 * time.Second

func (h health) Check(ctx context.Context) error {
	if len(h.argv) == 0 {
		return nil
	}
	var last error
	for {
		out, err := runHealthCommand(ctx, h.argv)
		if err == nil {
			return nil
		}
		last = fmt.Errorf("%s: %w: %s", h.argv[0], err, tail(out))
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("not healthy within the commit window: %w", last)
			}
			return last
		case <-time.After(healthRetry):
		}
	}
}

func tail(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) > 300 {
		b = b[len(b)-300:]
	}
	return string(b)
}
