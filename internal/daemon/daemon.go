// Package daemon is `otad run`: a device agent wired to MQTT, the control
// socket, the trust directory watcher and systemd's notify protocol.
package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"
	"github.com/fsnotify/fsnotify"

	"github.com/otad/otad/agent"
	"github.com/otad/otad/internal/config"
	"github.com/otad/otad/internal/control"
	"github.com/otad/otad/internal/device"
	"github.com/otad/otad/mqtt"

	"github.com/otad/otad/ota"
)

// Options are the daemon's knobs besides the config file.
type Options struct {
	AgentVersion string
	Logger       *slog.Logger
	// Rebooter overrides the device's (the demo restarts sim agents in-process).
	Rebooter agent.Rebooter
	// NoControlSocket skips the control socket (the demo's in-process devices).
	NoControlSocket bool
	// Started, if set, receives the device once the agent runs.
	Started func(*device.Device)
}

// Run runs the daemon until ctx ends or the device reboots under it. The
// caller holds the state lock.
func Run(ctx context.Context, cfg *config.Config, opt Options) error {
	log := opt.Logger
	if log == nil {
		log = slog.Default()
	}
	pub := &publisher{log: log}
	interval := watchdogInterval()
	d, err := device.Open(cfg, device.Options{
		AgentVersion: opt.AgentVersion, Logger: log, Rebooter: opt.Rebooter,
		Publishers: []agent.Publisher{pub, systemdStatus{}},
		Heartbeat:  func() { sddaemon.SdNotify(false, sddaemon.SdNotifyWatchdog) }, HeartbeatEvery: interval,
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	if cfg.MQTT.Broker != "" {
		m, err := mqtt.Dial(mqtt.Config{
			Broker: cfg.MQTT.Broker, TopicPrefix: cfg.MQTT.TopicPrefix, DeviceID: cfg.DeviceID, Groups: cfg.MQTT.Groups,
			CAFile: cfg.MQTT.CAFile, CertFile: cfg.MQTT.CertFile, KeyFile: cfg.MQTT.KeyFile,
			Username: cfg.MQTT.Username, Password: cfg.MQTT.Password, Logger: log,
		}, func(topic string, payload []byte) {
			if len(payload) == 0 {
				// A cleared desired topic withdraws nothing already accepted:
				// the newest valid offer across all topics stays the desired state.
				log.Info("desired offer cleared", "topic", topic)
				return
			}
			d.Agent.Offer(topic, payload)
		})
		if err != nil {
			return fmt.Errorf("%s: %w", cfg.Path, err)
		}
		pub.m.Store(m)
		defer func() {
			cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer ccancel()
			m.Close(cctx)
		}()
	}
	if !opt.NoControlSocket {
		srv, err := control.Listen(cfg.ControlSocket, d.Agent, log)
		if err != nil {
			return err
		}
		defer srv.Close()
		go srv.Serve(ctx)
	}
	if err := watchKeys(ctx, cfg.Trust.KeysDir, d.Keys, log); err != nil {
		return err
	}
	log.Info("otad running", "version", opt.AgentVersion, "device", cfg.DeviceID, "booted", d.Booted,
		"broker", cfg.MQTT.Broker, "bootloader", cfg.Bootloader.Type)
	sddaemon.SdNotify(false, sddaemon.SdNotifyReady)
	if opt.Started != nil {
		opt.Started(d)
	}
	err = d.Run(ctx)
	sddaemon.SdNotify(false, sddaemon.SdNotifyStopping)
	return err
}

// watchdogInterval is half the unit's WatchdogSec, or a quiet default.
func watchdogInterval() time.Duration {
	if d, err := sddaemon.SdWatchdogEnabled(false); err == nil && d > 0 {
		return d / 2
	}
	return 0
}

// publisher sends transitions and progress to MQTT once it is dialled.
type publisher struct {
	log *slog.Logger
	m   atomic.Pointer[mqtt.Device]
}

func (p *publisher) Publish(st ota.Status, ev ota.Event) {
	m := p.m.Load()
	if m == nil {
		return
	}
	if b, err := json.Marshal(st); err == nil {
		m.PublishStatus(b)
	}
	if ev.Seq == 0 {
		return // a status refresh, not a transition
	}
	if b, err := json.Marshal(ev); err == nil {
		m.PublishEvent(b)
	}
}

func (p *publisher) Progress(pr ota.Progress) {
	if m := p.m.Load(); m != nil {
		if b, err := json.Marshal(pr); err == nil {
			m.PublishProgress(b)
		}
	}
}

// systemdStatus shows the state in `systemctl status otad`.
type systemdStatus struct{}

func (systemdStatus) Publish(st ota.Status, _ ota.Event) {
	msg := "STATUS=" + string(st.State) + ", booted " + string(st.BootedSlot)
	if st.Target != nil {
		msg += ", installing " + st.Target.Version
	}
	if r := st.LastResult; r != nil {
		msg += ", last: " + string(r.Result)
		if r.Code != "" {
			msg += " (" + string(r.Code) + ")"
		}
	}
	sddaemon.SdNotify(false, msg)
}

func (systemdStatus) Progress(ota.Progress) {}

// watchKeys reloads the trust directory when it changes: a removed key stops
// being trusted at once; a bad file is logged and skipped.
func watchKeys(ctx context.Context, dir string, keys *device.Keys, log *slog.Logger) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("trust.keys_dir: watch: %w", err)
	}
	if err := w.Add(dir); err != nil {
		w.Close()
		return fmt.Errorf("trust.keys_dir %s: watch: %w", dir, err)
	}
	go func() {
		defer w.Close()
		// Editors and config management write in several steps: settle first.
		var settle <-chan time.Time
		for {
			select {
			case <-ctx.Done():
				return
			case _, ok := <-w.Events:
				if !ok {
					return
				}
				settle = time.After(200 * time.Millisecond)
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				log.Warn("trust.keys_dir watch", "err", err)
			case <-settle:
				if err := keys.Reload(); err != nil {
					log.Error("reloading trusted keys", "err", err)
				}
			}
		}
	}()
	return nil
}
