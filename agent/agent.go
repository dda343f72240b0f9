package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/otad/otad/ota"
)

// Config is what the loop needs besides its parts.
type Config struct {
	DeviceID     string
	AgentVersion string
	// Groups are the groups whose desired topics the device follows; the
	// status carries them so a rollout finds a group's devices (docs/contract/mqtt.md).
	Groups []string
	Policy Policy
	// CommitWindow bounds the health checks after booting a new slot.
	CommitWindow time.Duration
	// EffectTimeout bounds one bootloader operation.
	EffectTimeout time.Duration
	Logger        *slog.Logger
	// Heartbeat, if set, is called from the state-machine goroutine every
	// HeartbeatEvery: the systemd watchdog is fed from here, so a wedged
	// loop gets the unit restarted.
	Heartbeat      func()
	HeartbeatEvery time.Duration
	// OfferSettle gathers offers from the network this long before taking
	// the newest (retained offers of several topics arrive together).
	OfferSettle time.Duration
	// BuildTime is when otad was built: the lowest the clock floor goes.
	BuildTime time.Time
	// TrustVersion, when set, is the root of trust's version now, for
	// the status (docs/contract/trust.md).
	TrustVersion func() uint64
	// RetryDelay is the first backoff of an automatic retry ([retry] delay;
	// retry.go); 0 means 15 s.
	RetryDelay time.Duration
	// Rand draws the retries' jitter in [0, 1); nil is math/rand/v2.
	Rand func() float64
}

// Deps are the agent's edges.
type Deps struct {
	Store      Store
	Bootloader Bootloader
	Installer  Installer
	Checker    Checker
	Rebooter   Rebooter
	Health     HealthChecker
	Clock      Clock
	// Uptime is the boot clock the commit window counts on (runtime.go).
	Uptime     Uptime
	Publishers []Publisher
}

// Agent runs the state machine: one goroutine owns the state; offers,
// writer reports, health verdicts and operator commands all queue to it.
type Agent struct {
	cfg Config
	d   Deps
	log *slog.Logger

	inbox   *inbox
	cmds    chan func()
	stopped chan struct{} // closed when Run returns

	mu     sync.Mutex
	status ota.Status // last published snapshot, for Status()
	// confirming and bootID are the snapshot's running time and boot:
	// Status() reads the window left at the time it is asked.
	confirming RunTime
	bootID     string

	// Owned by the loop goroutine.
	state     State
	persisted State
	install   *running
	health    *running
	waiters   []*waiter
	progress  chan struct{}
	latest    atomic.Pointer[EvProgress]
	lastBytes int64
	lastAt    time.Time
	fatal     error
	recheck   bool // the pending offer is due for its re-check
	retries   retries
}

// runningMarks is how often a commit window's running time is journaled:
// a reboot loses at most a window over this of the count.
const runningMarks = 8

// New loads the journal and returns an agent ready to Run.
func New(cfg Config, d Deps) (*Agent, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.EffectTimeout == 0 {
		cfg.EffectTimeout = 30 * time.Second
	}
	if cfg.CommitWindow == 0 {
		cfg.CommitWindow = 5 * time.Minute
	}
	if cfg.RetryDelay == 0 {
		cfg.RetryDelay = DefaultRetryDelay
	}
	if d.Clock == nil {
		d.Clock = SystemClock{}
	}
	if d.Uptime == nil {
		d.Uptime = SystemUptime{}
	}
	s, _, err := d.Store.Load()
	if err != nil {
		return nil, err
	}
	a := &Agent{
		cfg: cfg, d: d, log: cfg.Logger,
		inbox: newInbox(), cmds: make(chan func()), stopped: make(chan struct{}),
		state: s, persisted: s.Clone(), progress: make(chan struct{}, 1),
	}
	a.status = a.snapshot(s, d.Clock.Now())
	if s.Target != nil {
		a.confirming, a.bootID = s.Target.Confirming, s.BootID
	}
	return a, nil
}

// Status returns the latest status snapshot; safe from any goroutine.
func (a *Agent) Status() ota.Status {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.status
	if st.State == ota.Confirming {
		st.Time = a.d.Clock.Now().UTC()
		st = WithWindowLeft(st, a.confirming, a.cfg.CommitWindow, a.bootID, a.d.Uptime.Uptime())
	}
	return st
}

// Offer queues a raw envelope without blocking. key names the source (an
// MQTT topic); a source can queue at most maxPerSource offers at once.
func (a *Agent) Offer(key string, raw []byte) { a.inbox.put(key, raw) }

// ErrStopped answers calls made after Run has returned.
var ErrStopped = errors.New("agent is not running")

// Refresh publishes the status again without a transition (its event has
// seq 0): what it shows from outside the journal changed, the root of
// trust's version.
func (a *Agent) Refresh(ctx context.Context) error {
	errc := make(chan error, 1)
	fn := func() {
		a.publish(Emit{State: a.state})
		errc <- nil
	}
	select {
	case a.cmds <- fn:
	case <-a.stopped:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
	return <-errc
}

// MarkGood commits the booted slot by hand.
func (a *Agent) MarkGood(ctx context.Context) error { return a.command(ctx, EvMarkGood{}) }

// MarkBad rejects the booted slot by hand and returns to the other one;
// under the manual reboot policy it drops an install staged for the reboot.
func (a *Agent) MarkBad(ctx context.Context) error { return a.command(ctx, EvMarkBad{}) }

// Cancel stops the running download or install (otad cancel).
func (a *Agent) Cancel(ctx context.Context) error { return a.command(ctx, EvCancel{}) }

// MarkActive is otad mark-active: booted drops a staged install, other
// switches to the other slot's verified image.
func (a *Agent) MarkActive(ctx context.Context, other bool) error {
	return a.command(ctx, EvMarkActive{Other: other})
}

// refusal is why the operator's ev cannot act on s now, or nil.
func (a *Agent) refusal(ev Event) error {
	switch ev := ev.(type) {
	case EvMarkBad:
		return CanMarkBad(a.state, a.cfg.Policy)
	case EvCancel:
		return CanCancel(a.state)
	case EvMarkActive:
		if err := CanMarkActive(a.state, a.cfg.Policy, ev.Other); err != nil || !ev.Other {
			return err
		}
		return a.otherTrusted()
	}
	return nil
}

// otherTrusted checks the signatures of the offer the other slot's image
// came from again, with the keys trusted now, before mark-active other
// makes it primary (docs/contract/trust.md rule 6): a release key revoked
// since it was installed must not get its image booted. The refusal is the
// operator's to read; the Mark effect checks again at the flip itself.
func (a *Agent) otherTrusted() error {
	o := a.state.Booted.Other()
	info := a.state.Slots[o]
	tc, ok := a.d.Checker.(TrustChecker)
	if !ok || len(info.Envelope) == 0 {
		return nil
	}
	if err := tc.CheckTrust(info.Envelope); err != nil {
		return fmt.Errorf("mark-active other refused: slot %s holds %s, whose offer no longer verifies: %w", o, info.ID, err)
	}
	return nil
}

func (a *Agent) command(ctx context.Context, ev Event) error {
	errc := make(chan error, 1)
	fn := func() {
		if err := a.refusal(ev); err != nil {
			errc <- err
			return
		}
		errc <- a.apply(ctx, ev)
	}
	select {
	case a.cmds <- fn:
	case <-a.stopped:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run drives the state machine until ctx ends or the device reboots under
// it. booted and bootID say where and in which boot the agent runs.
// On return the journal holds the state: an interrupted install resumes on
// the next Run.
func (a *Agent) Run(ctx context.Context, booted ota.Slot, bootID string) (err error) {
	defer close(a.stopped)
	defer func() { err = a.shutdown(err) }()
	boot, err := a.bootEvent(ctx, booted, bootID)
	if err != nil {
		return err
	}
	if err := a.apply(ctx, boot); err != nil {
		return err
	}
	return a.loop(ctx)
}

// shutdown stops the workers and answers everyone still waiting; a reboot
// the agent asked for is a clean end.
func (a *Agent) shutdown(err error) error {
	a.stopWorkers()
	a.finishWaiters(err)
	for _, it := range a.inbox.take() {
		if it.reply != nil {
			it.reply <- ota.Outcome{Result: ota.ResultFailed, Code: ota.CodeCancelled, Message: "agent stopped before taking the offer"}
		}
	}
	if errors.Is(err, ErrRebooted) {
		return nil
	}
	return err
}

// bootEvent is what the agent saw at this start.
func (a *Agent) bootEvent(ctx context.Context, booted ota.Slot, bootID string) (EvBoot, error) {
	boot := EvBoot{Booted: booted, BootID: bootID, Time: a.now(), Uptime: a.d.Uptime.Uptime()}
	if a.state.Phase == ota.Staged {
		// Whether the flip happened decides between finishing it and a fallback.
		order, err := a.d.Bootloader.Order(ctx)
		if err != nil {
			return boot, fmt.Errorf("bootloader: %w", err)
		}
		if len(order) > 0 {
			boot.FirstInOrder = order[0]
		}
	}
	return boot, nil
}

// loop waits for the next thing to happen — an offer, a worker's result,
// progress, a timer, a command — and applies it, until ctx ends.
func (a *Agent) loop(ctx context.Context) error {
	var beat, settle <-chan time.Time
	if a.cfg.Heartbeat != nil && a.cfg.HeartbeatEvery > 0 {
		t := time.NewTicker(a.cfg.HeartbeatEvery)
		defer t.Stop()
		beat = t.C
		a.cfg.Heartbeat()
	}
	// While the health check runs, the running time is journaled a few
	// times a window: a reboot while confirming keeps what this boot ran.
	running := time.NewTicker(max(a.cfg.CommitWindow/runningMarks, time.Second))
	defer running.Stop()
	for {
		var installDone, healthDone chan Event
		var runTick <-chan time.Time
		if a.install != nil {
			installDone = a.install.done
		}
		if a.health != nil {
			healthDone, runTick = a.health.done, running.C
		}
		var ev Event
		select {
		case <-ctx.Done():
			a.log.Info("stopping", "state", a.state.Phase)
			return nil
		case <-a.inbox.wake:
			// Retained offers arrive in a burst on every (re)connect: gather
			// them briefly so the newest is taken and an older one never
			// starts an install. Local installs do not wait.
			if a.cfg.OfferSettle > 0 && !a.inbox.hasLocal() {
				if settle == nil {
					settle = time.After(a.cfg.OfferSettle)
				}
				continue
			}
			settle = nil
			if err := a.takeOffers(ctx); err != nil {
				return err
			}
			continue
		case <-settle:
			settle = nil
			if err := a.takeOffers(ctx); err != nil {
				return err
			}
			continue
		case <-beat:
			a.cfg.Heartbeat()
			continue
		case <-a.retries.timer:
			if err := a.retryNow(ctx); err != nil {
				return err
			}
			continue
		case fn := <-a.cmds:
			fn()
			if a.fatal != nil {
				return a.fatal
			}
			continue
		case <-a.progress:
			if p := a.latest.Swap(nil); p != nil {
				ev = *p
			}
		case ev = <-installDone:
			a.install = nil
		case ev = <-healthDone:
			a.health = nil
		case <-runTick:
			ev = EvRunning{Uptime: a.d.Uptime.Uptime()}
		}
		if ev == nil {
			continue
		}
		if err := a.apply(ctx, ev); err != nil {
			return err
		}
	}
}
