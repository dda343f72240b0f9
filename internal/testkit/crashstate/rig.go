package crashstate

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/otad/otad/agent"
	"github.com/otad/otad/bootctl"
	"github.com/otad/otad/device/config"
	"github.com/otad/otad/device/node"
	"github.com/otad/otad/durable"
	"github.com/otad/otad/fetch"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/slots"
)

// Rig is one device of a scenario: its root directory holds the state
// directory, the boot environment, the trusted key; its slots are in
// memory. A run starts it from an Image and goes on to the update's end.
type Rig struct {
	sc      Scenario
	fx      *Fixture
	root    string
	cfg     *config.Config
	keys    *node.Keys
	client  *http.Client
	timeout time.Duration
	// broken, when set, replaces the journal's and the chunked state's
	// file system: a deliberately broken durable, for the tests that show
	// the explorer catches one.
	broken func(durable.FS) durable.FS
	// brokenDisk, when set, wraps the boot environment's Disk the same way.
	brokenDisk func(bootctl.Disk) bootctl.Disk
}

// maxBoots bounds the boots of one run: past it the device is stuck
// rebooting.
const maxBoots = 8

// NewRig makes a device of sc in root (an empty directory).
func NewRig(sc Scenario, fx *Fixture, root string) (*Rig, error) {
	keys := filepath.Join(root, "etc", "keys")
	if err := os.MkdirAll(keys, 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(keys, "release.pub"), fx.Signer.PublicKeyPEM, 0o600); err != nil {
		return nil, err
	}
	if err := sc.Boot.factory(root); err != nil {
		return nil, err
	}
	anchor, err := writeAnchor(sc, fx, root)
	if err != nil {
		return nil, err
	}
	bl := fmt.Sprintf("type = \"uboot\"\nenv_config = %q\n", filepath.Join(root, "etc", "fw_env.config"))
	if sc.Boot == GRUB {
		bl = fmt.Sprintf("type = \"grub\"\nenv_file = %q\n", filepath.Join(root, "boot", "grubenv"))
	}
	toml := fmt.Sprintf(`device_id = "crash-1"
compatible = "acme,crash"
state_dir = %q
[trust]
keys_dir = %q
%s[slots]
A = "/nonexistent/slot-a"
B = "/nonexistent/slot-b"
[bootloader]
%sattempts = %d
[download]
schemes = ["http"]
retries = 3
backoff = "1ms"
max_backoff = "10ms"
[commit]
window = "1m"
[reboot]
policy = "immediate"
`, filepath.Join(root, "state"), keys, anchor, bl, Attempts)
	cfg, err := config.Parse([]byte(toml), "crash device", "")
	if err != nil {
		return nil, err
	}
	k, err := node.LoadKeys(keys, discard())
	if err != nil {
		return nil, err
	}
	return &Rig{sc: sc, fx: fx, root: root, cfg: cfg, keys: k, client: fetch.NewHTTPClient(nil), timeout: 60 * time.Second}, nil
}

// factoryImage is a new device: the factory environment, the old image in
// slot A, nothing in slot B, no state.
func (r *Rig) factoryImage() (*Image, error) {
	a := make([]byte, SlotSize)
	copy(a, r.fx.Old)
	return readImage(r.root, map[string][]byte{"A": a, "B": make([]byte, SlotSize)})
}

// run powers the device on from img, recording into tr (nil: nothing), and
// goes on until the agent has settled: with offer (delivered again on each
// start, as a retained message is), until it has an outcome for it. What it
// finds depends on img alone; judge adds what depends on the history.
func (r *Rig) run(ctx context.Context, img *Image, tr *Trace, offer []byte) *Outcome {
	out := &Outcome{}
	if err := img.materialize(r.root); err != nil {
		out.fail("materialize: %v", err)
		return out
	}
	st := &storage{root: r.root, trace: tr, slots: map[ota.Slot]*slotBytes{
		ota.SlotA: newSlotBytes(img.File(slotName("A"))), ota.SlotB: newSlotBytes(img.File(slotName("B")))}}
	h := newHistory(nil)
	defer func() { out.marks = h.marks }()
	for boot := 0; ; boot++ {
		if boot == maxBoots {
			out.fail("still rebooting after %d boots", maxBoots)
			return out
		}
		slot, err := r.sc.Boot.powerOn(r.root, r.disk(st), func(s ota.Slot, def bool) {
			m := Mark{Kind: MarkBoot, Slot: s, DefaultEnv: def}
			tr.mark(m)
			h.add(m)
		})
		if err != nil {
			out.fail("the bootloader boots nothing: %v", err)
			return out
		}
		out.Booted = slot
		if !r.checkBoot(out, st, slot) {
			return out
		}
		rebooted := r.start(ctx, st, slot, offer, h, out)
		if out.failed() || !rebooted {
			if offer != nil && !out.failed() {
				r.checkEnd(out, st)
			}
			out.State = st
			return out
		}
	}
}

var bootSeq atomic.Uint64

// start runs one agent on the device booted from slot, until it settles
// (false) or reboots the device (true).
func (r *Rig) start(ctx context.Context, st *storage, slot ota.Slot, offer []byte, h *history, out *Outcome) bool {
	bl, err := r.sc.Boot.open(r.root, r.disk(st))
	if err == nil {
		_, err = bl.State(ctx)
	}
	if err != nil {
		// otad run refuses to start on an environment it cannot read.
		out.fail("otad does not start: boot environment: %v", err)
		return false
	}
	var fs durable.FS = fsys{st}
	if r.broken != nil {
		fs = r.broken(fs)
	}
	keys := r.keysAt(out, fs)
	if keys == nil {
		return false
	}
	targets := map[ota.Slot]slots.Target{ota.SlotA: slotTarget{st, ota.SlotA}, ota.SlotB: slotTarget{st, ota.SlotB}}
	rb := &rebooter{}
	pub := &publisher{r: r, st: st, h: h, out: out, changed: make(chan struct{}, 1)}
	clock := bootClock{at: r.fx.Epoch.Add(time.Duration(h.boots()) * BootTime), wall: time.Now()} // the run's boots only
	if st.slots[slot].sha256(ImageSize) == r.fx.NewSHA {
		// A board without an RTC: on the new slot, NTP has moved the clock
		// by more than a year, forward and back by turns. Nothing the agent
		// decides after the flip may depend on it (the commit window counts
		// running time, docs/contract/installing.md).
		clock.at = clock.at.Add(ClockJump * time.Duration(1-2*(h.boots()%2)))
	}
	p := node.NewParts(r.cfg, node.Options{Logger: discard(), Publishers: []agent.Publisher{pub}, Clock: clock}, node.Storage{
		Journal: agent.Journal{Dir: filepath.Join(r.root, "state"), FS: fs}, Boot: bl, Booted: slot,
		BootID: fmt.Sprintf("boot-%d", bootSeq.Add(1)), Reboot: rb, Slots: targets,
		StateDir: filepath.Join(r.root, "state"), StateFS: fs, CheckpointBytes: CheckpointBytes, Client: r.client, Keys: keys,
	})
	unhealthy := r.sc.End == Rollback && st.slots[slot].sha256(ImageSize) == r.fx.NewSHA
	p.Deps.Health = health(!unhealthy)
	p.Deps.Bootloader = uncancelled{p.Deps.Bootloader}
	manual := r.sc.End == MarkActive // the staged install waits for the operator
	var a *agent.Agent
	if r.sc.End == Cancel {
		p.Deps.Installer = stalled{Installer: p.Deps.Installer, done: func() bool { return r.undone(a.Status()) }}
	}
	a, err = agent.New(agent.Config{DeviceID: r.cfg.DeviceID, Policy: agent.Policy{RebootImmediately: !manual, MaxRestarts: 3},
		CommitWindow: r.cfg.Commit.Window.Duration, Logger: discard(), BuildTime: node.BuildTime()}, p.Deps)
	if err != nil {
		out.fail("the agent does not start: %v", err)
		return false
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx, slot, p.BootID) }()
	taken := make(chan struct{})    // the offer was taken: the first otad install answered
	finished := make(chan struct{}) // the installs are over
	again := make(chan struct{}, 1) // the operator installs the offer again (undo.go)
	go func() {
		defer close(finished)
		if offer == nil {
			close(taken)
			return
		}
		for first := true; ; first = false {
			o, err := a.Install(runCtx, offer)
			if first {
				close(taken)
			}
			if err != nil || (r.sc.End != Cancel && r.sc.End != MarkActive) {
				return
			}
			if o.Code == ota.CodeCancelled && r.sc.End == Cancel {
				continue // cancelled by the operator (or the agent stopped): install it again
			}
			select {
			case <-again:
			case <-runCtx.Done():
				return
			}
		}
	}()
	deadline := time.NewTimer(r.timeout)
	defer deadline.Stop()
	for took := false; ; {
		select {
		case err := <-done:
			if taken != nil {
				<-taken
			}
			cancel()
			<-finished
			if rb.called.Load() {
				return true
			}
			if err != nil {
				out.fail("the agent stopped: %v", err)
			}
			return false
		case <-taken:
			took, taken = true, nil
		case <-pub.changed:
		case <-deadline.C:
			out.fail("stuck: %s after %s on slot %s", a.Status().State, r.timeout, slot)
			cancel()
			<-done
			<-finished
			return false
		}
		s := a.Status()
		if offer != nil && r.undo(runCtx, a, s, again) {
			// The operator reboots the device (the manual policy).
			cancel()
			<-done
			<-finished
			return true
		}
		if took && s.State == ota.Idle && (offer == nil || s.LastResult != nil && s.LastResult.SHA256 == r.fx.NewSHA && !s.LastResult.Retryable) {
			cancel() // settled; a reboot it asked for still ends the run as one
		}
	}
}

// disk is the boot environment's Disk of st, broken when the rig is.
func (r *Rig) disk(st *storage) bootctl.Disk {
	d := st.disk()
	if r.brokenDisk != nil {
		return r.brokenDisk(d)
	}
	return d
}

// CheckpointBytes is the chunked install's checkpoint interval: a few
// checkpoints in the fixture's image, so that states resume from each.
const CheckpointBytes = 48 << 10

// BootTime is how long the device's clock runs from one power-on to the
// next: a state is explored long after the update was recorded, and the
// device's clock must read as if it rebooted at once.
const BootTime = 10 * time.Second

// ClockJump is how far the wall clock moves between starts on the new slot.
const ClockJump = 400 * 24 * time.Hour

// bootClock is the device's clock: at the power-on, then running.
type bootClock struct {
	at   time.Time
	wall time.Time
}

func (c bootClock) Now() time.Time { return c.at.Add(time.Since(c.wall)) }

type rebooter struct{ called atomic.Bool }

func (rb *rebooter) Reboot(context.Context) error {
	rb.called.Store(true)
	return agent.ErrRebooted
}

type health bool

var errUnhealthy = errors.New("the new image fails its health check")

func (h health) Check(context.Context) error {
	if !h {
		return errUnhealthy
	}
	return nil
}

// uncancelled lets a bootloader operation in flight finish when the run is
// stopped: the rig stops an agent that has settled, and an operation cut
// by that would be a failure the device never has.
type uncancelled struct{ agent.Bootloader }

func (u uncancelled) MarkBad(ctx context.Context, s ota.Slot) error {
	return u.Bootloader.MarkBad(context.WithoutCancel(ctx), s)
}
func (u uncancelled) MarkActive(ctx context.Context, s ota.Slot) error {
	return u.Bootloader.MarkActive(context.WithoutCancel(ctx), s)
}
func (u uncancelled) MarkGood(ctx context.Context, s ota.Slot) error {
	return u.Bootloader.MarkGood(context.WithoutCancel(ctx), s)
}
func (u uncancelled) Order(ctx context.Context) ([]ota.Slot, error) {
	return u.Bootloader.Order(context.WithoutCancel(ctx))
}

// Outcome is what a run found.
type Outcome struct {
	mu         sync.Mutex
	Violations []string
	Result     *ota.Outcome // the final result for the offer
	Booted     ota.Slot
	State      *storage
	runs       string // the image the device ends on
	marks      []Mark // the run's boots and events
}

func (o *Outcome) fail(format string, a ...any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.Violations) < 8 {
		o.Violations = append(o.Violations, fmt.Sprintf(format, a...))
	}
}

func (o *Outcome) failed() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.Violations) > 0
}
