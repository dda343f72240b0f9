package node

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os/exec"
	"time"

	"github.com/otad/otad/agent"
	"github.com/otad/otad/backoff"
	"github.com/otad/otad/bootctl"
	"github.com/otad/otad/device/config"
	"github.com/otad/otad/durable"
	"github.com/otad/otad/fetch"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/slots"
)

// OfferSettle is how long network offers gather before the newest is taken:
// the retained offers of all desired topics arrive together on connect.
const OfferSettle = 200 * time.Millisecond

// Options are what the assembly needs besides the config.
type Options struct {
	AgentVersion string
	Logger       *slog.Logger
	Publishers   []agent.Publisher
	Clock        agent.Clock
	// Uptime is the boot clock the commit window counts on (nil: the system's).
	Uptime agent.Uptime
	// Heartbeat is called from the agent loop every HeartbeatEvery.
	Heartbeat      func()
	HeartbeatEvery time.Duration
	// BeforeWrite, when set, is called as a slot write starts, once the
	// offer is checked: otad drops the pages its start-up and the checks
	// touched, so that they do not count in the install's peak RSS.
	BeforeWrite func()
	// Pipelined is slots.Job.Pipelined for every install.
	Pipelined func() (end func())
}

func (o Options) logger() *slog.Logger {
	if o.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return o.Logger
}

// Node is this device as otad runs it: the agent assembled from a config,
// the slot it booted, and the keys it trusts.
type Node struct {
	Config *config.Config
	Agent  *agent.Agent
	Booted ota.Slot
	BootID string
	Keys   *Keys
	// Sources are payloads given by hand for an offer (otad install --payload).
	Sources *Sources
}

// Parts are the pieces behind the agent's interfaces, as Build makes them
// from a config, and where the agent runs. Any of them can be replaced
// before Assemble: tests wrap them to inject faults. A simulated device
// makes them on storage of its own (NewParts).
type Parts struct {
	Deps    agent.Deps
	Booted  ota.Slot
	BootID  string
	Keys    *Keys
	Sources *Sources
}

// Open builds the parts from cfg and assembles the node. The caller holds
// the state lock.
func Open(cfg *config.Config, opt Options) (*Node, error) {
	p, err := Build(cfg, opt)
	if err != nil {
		return nil, err
	}
	return Assemble(cfg, p, opt)
}

// Build makes the concrete parts cfg names: the bootloader backend and the
// booted slot, the journal, the slot writer, the offer checks with the
// trusted keys, the health command and the reboot. It refuses what otad run
// refuses to start on (a *Refusal, startup.go) and logs the warnings.
func Build(cfg *config.Config, opt Options) (*Parts, error) {
	log := opt.logger()
	b, r := openBoot(cfg, log, false)
	if r != nil {
		return nil, r
	}
	keys, r := openKeys(cfg, log)
	if r != nil {
		return nil, r
	}
	tc, r := downloadTLS(cfg)
	if r != nil {
		return nil, r
	}
	// A missing slot device is not fatal: the booted slot still has to be
	// committed after a boot; but installs into it would fail (write_failed)
	// much later, so say it now.
	for _, w := range warnings(cfg, keys.Keyring()) {
		log.Warn(w.Msg, "key", w.Key, "path", w.Path, "err", w.Err)
	}
	targets := map[ota.Slot]slots.Target{}
	for slot, dev := range cfg.Slots.Devices() {
		targets[slot] = slots.File(dev)
	}
	return NewParts(cfg, opt, Storage{
		Journal: agent.Journal{Dir: cfg.StateDir}, Boot: b.bl, Booted: b.booted, BootID: b.bootID, Reboot: b.reboot,
		Slots: targets, StateDir: cfg.StateDir, Client: fetch.NewHTTPClient(tc), Keys: keys,
	}), nil
}

// Storage is what a device's parts stand on: where it keeps its state and
// its images, and what it trusts and downloads with. Build makes it from the
// config's files; a simulated device brings its own (sim/device).
type Storage struct {
	Journal agent.Store
	Boot    bootctl.Bootloader
	Booted  ota.Slot
	BootID  string
	Reboot  agent.Rebooter
	// Slots are where each slot's images go (a slots.File per [slots]
	// device).
	Slots map[ota.Slot]slots.Target
	// StateDir keeps the chunked install's checkpoint and kept indexes,
	// replaced on StateFS (nil: the operating system's).
	StateDir string
	StateFS  durable.FS
	// CheckpointBytes is a chunked install's checkpoint interval (0: the
	// default; slots.ChunkedJob).
	CheckpointBytes int64
	Client          *http.Client
	Keys            *Keys
}

// NewParts makes the parts on st with the policy of cfg (download, trust,
// commit, reboot); cfg's paths are not used.
func NewParts(cfg *config.Config, opt Options, st Storage) *Parts {
	dl := cfg.Download
	sources := &Sources{}
	return &Parts{
		Deps: agent.Deps{
			Store:      st.Journal,
			Bootloader: orderedBootloader{st.Boot},
			Installer: &installer{slots: st.Slots, booted: st.Booted, stateDir: st.StateDir, stateFS: st.StateFS, checkpoint: st.CheckpointBytes, readback: *cfg.Slots.Readback,
				retry: backoff.Policy{Attempts: dl.Retries, Base: dl.Backoff.Duration, Max: dl.MaxBackoff.Duration},
				skew:  cfg.Trust.ClockSkew.Duration, client: st.Client, schemes: dl.Schemes, sources: sources, log: opt.logger(), beforeWrite: opt.BeforeWrite, pipelined: opt.Pipelined},
			Checker:    newChecker(cfg, st.Keys, st.Slots, opt.Clock),
			Rebooter:   st.Reboot,
			Health:     health{argv: cfg.Commit.HealthCommand, log: opt.logger()},
			Clock:      opt.Clock,
			Uptime:     opt.Uptime,
			Publishers: opt.Publishers,
		},
		Booted: st.Booted, BootID: st.BootID, Keys: st.Keys, Sources: sources,
	}
}

// policy is the agent's policy from cfg.
func policy(cfg *config.Config) agent.Policy {
	return agent.Policy{RebootImmediately: cfg.Reboot.Policy == "immediate", MaxRestarts: 3, RetryAttempts: cfg.Retry.Count()}
}

// Assemble builds the agent on p with the policy of cfg.
func Assemble(cfg *config.Config, p *Parts, opt Options) (*Node, error) {
	a, err := agent.New(agent.Config{
		DeviceID:     cfg.DeviceID,
		AgentVersion: opt.AgentVersion,
		Groups:       cfg.MQTT.Groups,
		Policy:       policy(cfg),
		CommitWindow: cfg.Commit.Window.Duration,
		Logger:       opt.logger(),
		OfferSettle:  OfferSettle,
		Heartbeat:    opt.Heartbeat, HeartbeatEvery: opt.HeartbeatEvery,
		BuildTime:    BuildTime(),
		TrustVersion: p.Keys.Version,
		RetryDelay:   cfg.Retry.Delay.Duration,
	}, p.Deps)
	if err != nil {
		return nil, err
	}
	return &Node{Config: cfg, Agent: a, Booted: p.Booted, BootID: p.BootID, Keys: p.Keys, Sources: p.Sources}, nil
}

// Run runs the agent on the booted slot until ctx ends or the device reboots.
func (n *Node) Run(ctx context.Context) error { return n.Agent.Run(ctx, n.Booted, n.BootID) }

// health runs the configured command until it passes or the commit window
// (the context) ends; no command means "the agent came up" is healthy enough.
type health struct {
	argv  []string
	log   *slog.Logger
	every time.Duration // between failed checks; 0: healthRetry
}

// healthRetry is the pause between failed health checks within the window.
const healthRetry = 5 * time.Second

func (h health) Check(ctx context.Context) error {
	if len(h.argv) == 0 {
		return nil
	}
	every := cmp.Or(h.every, healthRetry)
	var last error
	for n := 1; ; n++ {
		out, err := runHealthCommand(ctx, h.argv)
		if err == nil {
			return nil
		}
		last = fmt.Errorf("%s: %w: %s", h.argv[0], err, tail(out))
		if ctx.Err() == nil {
			h.warn(n, err, out)
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("not healthy within the commit window: %w", last)
			}
			return last
		case <-time.After(every):
		}
	}
}

// warn logs failed check n: at most one line per check interval, so an
// operator sees why the slot is not committed before the window ends.
func (h health) warn(n int, err error, out []byte) {
	if h.log == nil {
		return
	}
	exit := err.Error()
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		exit = ee.ProcessState.String()
	}
	head := bytes.TrimSpace(out)
	if len(head) > 200 {
		head = head[:200]
	}
	h.log.Warn("health check failed: checked again until it passes or the commit window ends",
		"check", n, "command", h.argv[0], "exit", exit, "output", string(head))
}

func tail(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) > 300 {
		b = b[len(b)-300:]
	}
	return string(b)
}
