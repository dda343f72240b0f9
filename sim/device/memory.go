package device

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/otad/otad/agent"
	"github.com/otad/otad/bootctl/sim"
	"github.com/otad/otad/device/config"
	"github.com/otad/otad/device/daemon"
	"github.com/otad/otad/device/node"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/slots"
	"github.com/otad/otad/trust"
)

// Shared is what the in-memory devices of one fleet share, so that an idle
// device costs little: the config parsed once, the trusted keys, one HTTP
// transport, one logger, and the bound on installs at once.
type Shared struct {
	Config *config.Config // MemoryConfig's; each device copies it with its own ID
	// Keys are the keys every device trusts, without a root of trust.
	Keys *node.Keys
	// Root, when set instead, is the root of trust the devices ship
	// (node.ReadAnchor's; Config.Trust.Root names it, so each device takes
	// retained roots over MQTT as otad does). Each device walks its own
	// chain from it and keeps what it accepted in memory.
	Root *trust.Root
	// Transport carries every device's downloads; each request names its
	// device in DeviceHeader, so an image server can count per device.
	Transport http.RoundTripper
	// Installs bounds the installs running at once (a buffered channel of
	// that capacity); nil: no bound. An install waiting here has taken no
	// slot memory and no pipeline buffers yet.
	Installs chan struct{}
	// Slots, when set, keeps the memory of slot writes that ended for the
	// next ones (one mapping per install at once).
	Slots        *MemPool
	AgentVersion string
	Logger       *slog.Logger
	// Observe, when set, is given every status snapshot a device's agent
	// publishes, in the agent's loop (it must not block): a fleet's own view
	// of its devices that needs no broker.
	Observe func(ota.Status)
}

// DeviceHeader names the simulated device on its download requests.
const DeviceHeader = "X-Otasim-Device"

// MemoryConfig checks s as a device config without writing anything: the
// policy (download, trust, commit window, reboot, groups, broker) every
// in-memory device of a fleet runs with. The paths in it are not used.
func MemoryConfig(s Spec) (*config.Config, error) {
	if s.Dir == "" {
		s.Dir = "/nonexistent/in-memory"
	}
	b, err := s.Config()
	if err != nil {
		return nil, err
	}
	return config.Parse(b, "in-memory device config", "")
}

// Memory is a simulated device's storage kept in memory across its
// simulated reboots, as flash keeps it across real ones: the journal, the
// sim bootloader's state and both slots. A fleet of thousands in one
// process (otasim fleet) keeps no file per device, and a slot takes memory
// only while it is written.
type Memory struct {
	Journal *agent.MemJournal
	Boot    *sim.Sim
	Slots   map[ota.Slot]*MemSlot
}

// NewMemory is a new device's storage: slots of slotSize bytes named after
// the device, the sim bootloader as from the factory (booted A); pool, when
// not nil, lends the slots their memory while written.
func NewMemory(id string, slotSize int64, attempts int, pool *MemPool) (*Memory, error) {
	boot, err := sim.NewMemory(attempts)
	if err != nil {
		return nil, fmt.Errorf("simulated device %s: %w", id, err)
	}
	return &Memory{
		Journal: &agent.MemJournal{},
		Boot:    boot,
		Slots: map[ota.Slot]*MemSlot{
			ota.SlotA: NewMemSlot(id+":A (memory)", slotSize).pooled(pool),
			ota.SlotB: NewMemSlot(id+":B (memory)", slotSize).pooled(pool),
		},
	}, nil
}

// parts makes the parts of a simulated device on m, as node.Build makes
// them from files: the sim bootloader, the journal and the slots in m;
// keys and the HTTP client are the caller's (a fleet shares them). cfg gives
// the policy (download, trust, commit, reboot); its paths are not used.
func (m *Memory) parts(cfg *config.Config, keys *node.Keys, client *http.Client, opt node.Options) (*node.Parts, error) {
	booted, err := m.Boot.Booted()
	if err != nil {
		return nil, err
	}
	bootID, err := m.Boot.BootID()
	if err != nil {
		return nil, err
	}
	targets := map[ota.Slot]slots.Target{}
	for s, slot := range m.Slots {
		targets[s] = slot
	}
	return node.NewParts(cfg, opt, node.Storage{
		Journal: m.Journal, Boot: m.Boot, Booted: booted, BootID: bootID, Reboot: node.SimReboot{Sim: m.Boot},
		Slots: targets, Client: client, Keys: keys,
	}), nil
}

// MemDevice is a simulated device held wholly in memory (Memory): a
// real agent with the sim bootloader, the MQTT client and the offer checks,
// whose health check passes or fails as told.
type MemDevice struct {
	ID      string
	Memory  *Memory
	healthy bool
	cfg     config.Config
	shared  *Shared
	client  *http.Client
	// keys are what the device trusts, kept across its simulated reboots:
	// the fleet's shared keys, or its own root of trust (Shared.Root).
	keys *node.Keys
	life
}

// NewMemDevice is device id of a fleet sharing sh; its slots hold slotSize
// bytes each.
func NewMemDevice(sh *Shared, id string, slotSize int64, healthy bool) (*MemDevice, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	m, err := NewMemory(id, slotSize, Attempts, sh.Slots)
	if err != nil {
		return nil, err
	}
	d := &MemDevice{ID: id, Memory: m, healthy: healthy, cfg: *sh.Config, shared: sh,
		client: &http.Client{Transport: named{rt: sh.Transport, id: id}}, keys: sh.Keys}
	d.cfg.DeviceID = id
	if sh.Root != nil {
		log := sh.Logger
		if log == nil {
			log = slog.New(slog.DiscardHandler)
		}
		d.keys = node.RootInMemory(sh.Root, log.With("device", id))
	}
	return d, nil
}

// TrustVersion is the version of the root of trust the device holds now;
// 0 without one.
func (d *MemDevice) TrustVersion() uint64 { return d.keys.Version() }

// Run runs the device until ctx ends: started again after each simulated
// reboot, and after a pause after an error.
func (d *MemDevice) Run(ctx context.Context) {
	log := d.shared.Logger.With("device", d.ID)
	d.run(ctx, log, func(ctx context.Context) error {
		d.poweredOn(log)
		return runAgent(ctx, &d.cfg, daemon.Options{AgentVersion: d.shared.AgentVersion, Logger: log, Build: d.build})
	})
}

func (d *MemDevice) build(cfg *config.Config, opt node.Options) (*node.Parts, error) {
	p, err := d.Memory.parts(cfg, d.keys, d.client, opt)
	if err != nil {
		return nil, err
	}
	p.Deps.Health = simHealth(d.healthy)
	if d.shared.Observe != nil {
		p.Deps.Publishers = append(p.Deps.Publishers, observer(d.shared.Observe))
	}
	if d.shared.Installs != nil {
		p.Deps.Installer = bounded{Installer: p.Deps.Installer, slots: d.shared.Installs}
	}
	return p, nil
}

// simHealth is the device's health check: a failing one fails at once, as
// a health command that exits non-zero on a broken image.
type simHealth bool

var errUnhealthy = errors.New("simulated health check failed (otasim --fail-health / --fail-devices)")

func (h simHealth) Check(context.Context) error {
	if !h {
		return errUnhealthy
	}
	return nil
}

// bounded waits for one of the fleet's install slots before installing.
type bounded struct {
	agent.Installer
	slots chan struct{}
}

func (b bounded) Install(ctx context.Context, job agent.InstallJob, progress func(ota.Progress)) error {
	select {
	case b.slots <- struct{}{}:
	case <-ctx.Done():
		return ota.Wrap(ota.CodeCancelled, fmt.Errorf("waiting for an install slot: %w", ctx.Err()))
	}
	defer func() { <-b.slots }()
	return b.Installer.Install(ctx, job, progress)
}

// named adds the device's name to its requests.
type named struct {
	rt http.RoundTripper
	id string
}

func (n named) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(DeviceHeader, n.id)
	return n.rt.RoundTrip(r)
}

// observer hands status snapshots to a func.
type observer func(ota.Status)

func (o observer) Publish(st ota.Status, _ ota.Event) { o(st) }
func (observer) Progress(ota.Progress)                {}
