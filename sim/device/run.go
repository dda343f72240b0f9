package device

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/otad/otad/device/config"
	"github.com/otad/otad/device/daemon"
	"github.com/otad/otad/device/statelock"
)

// Device is a simulated device that runs a real agent (device/daemon) on
// its files, started again after every simulated reboot.
type Device struct {
	ID     string
	Paths  Paths
	Config *config.Config

	agentVersion string
	life
}

// life is a simulated device's power: the agent started again after each
// simulated reboot, as systemd starts otad.
type life struct {
	mu      sync.Mutex
	boots   int
	lastErr error
}

// New lays the device out (Layout); agentVersion is what its status reports.
func New(s Spec, agentVersion string) (*Device, error) {
	p, cfg, err := Layout(s)
	if err != nil {
		return nil, err
	}
	return &Device{ID: s.ID, Paths: p, Config: cfg, agentVersion: agentVersion}, nil
}

// Boots is how many times the agent has started (one more per simulated reboot).
func (l *life) Boots() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.boots
}

// Err is the last error the agent stopped with, if any.
func (l *life) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastErr
}

// restartPause is how long a failed agent waits before it starts again.
const restartPause = time.Second

// Run runs the device until ctx ends, as systemd runs otad: under the state
// lock, started again after each simulated reboot (daemon.Run returns nil)
// and, after a pause, after an error. Its log goes to Paths.Log.
func (d *Device) Run(ctx context.Context) error {
	f, err := os.OpenFile(d.Paths.Log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("simulated device %s: log: %w", d.ID, err)
	}
	defer f.Close()
	log := slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelInfo})).With("device", d.ID)
	d.run(ctx, log, func(ctx context.Context) error { return d.runOnce(ctx, log) })
	return nil
}

// run powers the device on with once until ctx ends: again at once after
// a simulated reboot (once returns nil), after a pause after an error.
func (l *life) run(ctx context.Context, log *slog.Logger, once func(context.Context) error) {
	for ctx.Err() == nil {
		err := once(ctx)
		if err == nil {
			continue // a simulated reboot: power on again
		}
		log.Error("agent stopped", "err", err)
		l.mu.Lock()
		l.lastErr = err
		l.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(restartPause):
		}
	}
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
	d.poweredOn(log)
	err = runAgent(ctx, d.Config, daemon.Options{AgentVersion: d.agentVersion, Logger: log})
	if rerr := lock.Release(); rerr != nil {
		err = errors.Join(err, fmt.Errorf("state lock: %w", rerr))
	}
	return err
}

func (l *life) poweredOn(log *slog.Logger) {
	l.mu.Lock()
	l.boots++
	l.mu.Unlock()
	log.Info("power on")
}

// runAgent is the daemon without its control socket and key watcher: an
// in-process device takes offers over MQTT only.
func runAgent(ctx context.Context, cfg *config.Config, opt daemon.Options) error {
	d, err := daemon.New(cfg, opt)
	if err != nil {
		return err
	}
	disconnect, err := d.ConnectMQTT(ctx)
	if err != nil {
		return err
	}
	defer disconnect()
	opt.Logger.Info("otad running", "version", opt.AgentVersion, "device", cfg.DeviceID, "booted", d.Node().Booted,
		"broker", strings.TrimSpace(strings.Join(append([]string{cfg.MQTT.Broker}, cfg.MQTT.Brokers...), " ")), "bootloader", cfg.Bootloader.Type)
	return d.Node().Run(ctx)
}
