package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"

	"github.com/otad/otad/agent"
	"github.com/otad/otad/device/busapi"
	"github.com/otad/otad/device/config"
	"github.com/otad/otad/device/control"
	"github.com/otad/otad/device/node"
	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/verify"
)

// Options are the daemon's knobs besides the config file.
type Options struct {
	AgentVersion string
	Logger       *slog.Logger
	// Reconnect is the MQTT reconnect backoff; zero is mqtt's default (tests
	// that stop the broker for long use a shorter one).
	Reconnect mqtt.Backoff
	// Build makes the device's parts; nil: node.Build, from the config's
	// files. A simulated fleet builds its devices in memory.
	Build func(*config.Config, node.Options) (*node.Parts, error)
	// BeforeWrite is node.Options.BeforeWrite.
	BeforeWrite func()
	// Pipelined is node.Options.Pipelined.
	Pipelined func() (end func())
}

// Daemon is one device's agent with its links to the outside: MQTT, the
// control socket, the trust directory watcher, systemd.
type Daemon struct {
	cfg     *config.Config
	log     *slog.Logger
	version string
	// reconnect is Options.Reconnect.
	reconnect mqtt.Backoff
	pub       *publisher
	// bus is the agent on the D-Bus system bus, once Run joins it.
	bus  *busapi.Object
	node *node.Node
}

// New assembles the device from cfg (node.Open), with MQTT and systemd
// listening to its transitions. The caller holds the state lock.
func New(cfg *config.Config, opt Options) (*Daemon, error) {
	log := opt.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &Daemon{cfg: cfg, log: log, version: opt.AgentVersion, reconnect: opt.Reconnect, pub: &publisher{compatible: cfg.Compatible}, bus: busapi.New(log)}
	nopt := node.Options{
		AgentVersion: opt.AgentVersion, Logger: log,
		Publishers: []agent.Publisher{d.pub, d.bus, systemdStatus{words: func(st ota.Status) string { return StateWords(st, cfg.Reboot.Policy == "manual") }}},
		Heartbeat:  func() { sddaemon.SdNotify(false, sddaemon.SdNotifyWatchdog) }, HeartbeatEvery: watchdogInterval(),
		BeforeWrite: opt.BeforeWrite,
		Pipelined:   opt.Pipelined,
	}
	build := opt.Build
	if build == nil {
		build = node.Build
	}
	p, err := build(cfg, nopt)
	if err != nil {
		return nil, err
	}
	n, err := node.Assemble(cfg, p, nopt)
	if err != nil {
		return nil, err
	}
	d.node = n
	return d, nil
}

// Node is the assembled device.
func (d *Daemon) Node() *node.Node { return d.node }

// Run is `otad run`: New, then Daemon.Run. The caller holds the state lock.
func Run(ctx context.Context, cfg *config.Config, opt Options) error {
	d, err := New(cfg, opt)
	if err != nil {
		return err
	}
	return d.Run(ctx)
}

// Run connects MQTT (when configured), serves the control socket, watches
// the trust directory and runs the agent until ctx ends or the device
// reboots under it.
func (d *Daemon) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if r := node.CheckMQTT(d.cfg); r != nil {
		return r
	}
	closeMQTT, err := d.ConnectMQTT(ctx)
	if err != nil {
		return err
	}
	defer closeMQTT()
	if d.cfg.Trust.Root == "" {
		if err := watchKeys(ctx, d.cfg.Trust.KeysDir, d.node.Keys, d.log); err != nil {
			return err
		}
	}
	h := served{Agent: d.node.Agent, d: d}
	// D-Bus is for device UIs, where there is a bus: without one (or
	// without its policy) otad runs as it did (docs/contract/dbus.md).
	if stopBus, err := d.bus.Start(ctx, h); err != nil {
		d.log.Info("not on D-Bus", "err", err)
	} else {
		defer stopBus()
	}
	// The control socket comes last: once it answers, everything else is up.
	srv, err := control.Listen(d.cfg.ControlSocket, h, d.log)
	if err != nil {
		return err
	}
	defer srv.Close()
	go srv.Serve(ctx)
	d.log.Info("otad running", "version", d.version, "device", d.cfg.DeviceID, "booted", d.node.Booted,
		"broker", Brokers(d.cfg.MQTT), "bootloader", d.cfg.Bootloader.Type)
	sddaemon.SdNotify(false, sddaemon.SdNotifyReady)
	err = d.node.Run(ctx)
	sddaemon.SdNotify(false, sddaemon.SdNotifyStopping)
	return err
}

// ConnectMQTT dials the broker of the config, if any: offers from the
// desired topics go to the agent, transitions and progress go out. The
// returned func disconnects.
func (d *Daemon) ConnectMQTT(ctx context.Context) (func(), error) {
	cfg, log := d.cfg, d.log
	if !cfg.MQTT.Enabled() {
		return func() {}, nil
	}
	m, err := mqtt.Dial(mqtt.Config{
		Broker: cfg.MQTT.Broker, Brokers: cfg.MQTT.Brokers, TopicPrefix: cfg.MQTT.TopicPrefix, DeviceID: cfg.DeviceID, Groups: cfg.MQTT.Groups,
		CAFile: cfg.MQTT.CAFile, CertFile: cfg.MQTT.CertFile, KeyFile: cfg.MQTT.KeyFile,
		Username: cfg.MQTT.Username, Password: cfg.MQTT.Password, Logger: log,
		OnOversized: d.node.Agent.Dropped, Reconnect: d.reconnect, OnRoot: d.onRoot(ctx),
	}, func(topic string, payload []byte) {
		if len(payload) == 0 {
			// A cleared desired topic withdraws nothing already accepted:
			// the newest valid offer across all topics stays the desired state.
			log.Info("desired offer cleared", "topic", topic)
			return
		}
		d.node.Agent.Offer(topic, payload)
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.Path, err)
	}
	d.pub.m.Store(m)
	return func() {
		d.pub.m.Store(nil)
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer ccancel()
		m.Close(cctx)
	}, nil
}

// onRoot takes a retained root of trust through the checks, off paho's
// goroutine; nil (no subscription) on a device without a root. A root no
// newer than the device's arrives on every connect: that is no news.
func (d *Daemon) onRoot(ctx context.Context) func(topic string, payload []byte) {
	if d.cfg.Trust.Root == "" {
		return nil
	}
	return func(topic string, payload []byte) {
		go func() {
			from, to, err := d.node.UpdateRoot(ctx, [][]byte{payload})
			switch {
			case ota.CodeOf(err) == ota.CodeRootVersion && strings.Contains(err.Error(), "not newer"):
				d.log.Debug("root of trust: nothing newer", "topic", topic, "version", from, "err", err)
			case err != nil:
				d.log.Warn("root of trust refused", "topic", topic, "version", from, "err", err)
			default:
				d.log.Info("root of trust updated", "topic", topic, "from", from, "to", to)
			}
		}()
	}
}

// UpdateRoot is otad trust update through the control socket.
func (s served) UpdateRoot(ctx context.Context, docs [][]byte) (uint64, uint64, error) {
	return s.d.node.UpdateRoot(ctx, docs)
}

// served is what the control socket serves: the agent, whose status also
// says whether the broker is connected (`otad status`).
type served struct {
	*agent.Agent
	d *Daemon
}

func (s served) Status() ota.Status {
	st := s.Agent.Status()
	if b := Brokers(s.d.cfg.MQTT); b != "" {
		m := s.d.pub.m.Load()
		st.Broker = &ota.BrokerLink{URL: b, Connected: m != nil && m.Connected()}
	}
	return st
}

// InstallWithPayload installs an envelope whose payload is read from where
// the person gave it (otad install --payload): the node's Sources hold it
// while the offer is taken up, and after, while it waits as pending.
func (s served) InstallWithPayload(ctx context.Context, source string, raw []byte, p control.Payload) (ota.Outcome, error) {
	src := node.Source{URL: p.URL, IndexURL: p.IndexURL, StoreURL: p.StoreURL, Files: p.Files, Names: map[string]string{}}
	if err := agent.GivenPayloadBusy(s.Agent.Status()); err != nil {
		src.Close()
		return ota.Outcome{}, err
	}
	for i, role := range p.Passed {
		u := node.FdURL(p.Files[i])
		if i < len(p.Paths) {
			src.Names[u] = p.Paths[i]
		}
		switch role {
		case "stream":
			src.URL = u
		case "index":
			src.IndexURL = u
		case "store":
			src.StoreURL = u
		}
	}
	key := verify.EnvelopeDigest(raw)
	if key == "" {
		src.Close()
		return s.Agent.InstallFrom(ctx, source, raw) // refused as it is
	}
	s.d.node.Sources.Put(key, src)
	o, err := s.Agent.InstallGiven(ctx, source, raw)
	if err != nil || o.Result != ota.ResultPending {
		s.d.node.Sources.Drop(key)
	}
	return o, err
}

// Brokers names the configured brokers (for the log and otad status).
func Brokers(m config.MQTT) string {
	if len(m.Brokers) > 0 {
		return strings.Join(m.Brokers, ",")
	}
	return m.Broker
}

// watchdogInterval is half the unit's WatchdogSec, or a quiet default.
func watchdogInterval() time.Duration {
	if d, err := sddaemon.SdWatchdogEnabled(false); err == nil && d > 0 {
		return d / 2
	}
	return 0
}
