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
	Policy       Policy
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
	// Interrupt is fault injection for crash tests: called before each
	// effect, an error stops the loop right there, as if the process died.
	Interrupt func(Effect) error
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
}

type running struct {
	cancel context.CancelFunc
	done   chan Event
}

type waiter struct {
	sha   string
	reply chan ota.Outcome
}

// New loads the journal and returns an agent ready to Run.
func New(cfg Config, d Deps) (*Agent, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.EffectTimeout == 0 {
		cfg.EffectTimeout = 30 * time.Second
	}
	if cfg.CommitWindow == 0 {
		cfg.CommitWindow = 5 * time.Minute
	}
	if d.Clock == nil {
		d.Clock = SystemClock{}
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
	a.status = Snapshot(cfg.DeviceID, cfg.AgentVersion, s, d.Clock.Now())
	return a, nil
}

// Status returns the latest status snapshot; safe from any goroutine.
func (a *Agent) Status() ota.Status {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.status
}

// Offer queues a raw envelope without blocking. key names the source (an
// MQTT topic); a source can queue at most maxPerSource offers at once.
func (a *Agent) Offer(key string, raw []byte) { a.inbox.put(key, raw, nil) }

// Install hands an envelope to the loop and waits for its outcome: refused,
// up to date, failed, or the boot slot flipped.
func (a *Agent) Install(ctx context.Context, raw []byte) (ota.Outcome, error) {
	reply := make(chan ota.Outcome, 1)
	a.inbox.put("", raw, reply)
	select {
	case o := <-reply:
		return o, nil
	case <-a.stopped:
		select {
		case o := <-reply: // answered on the way out
			return o, nil
		default:
			return ota.Outcome{}, ErrStopped
		}
	case <-ctx.Done():
		return ota.Outcome{}, ctx.Err()
	}
}

// ErrStopped answers calls made after Run has returned.
var ErrStopped = errors.New("agent is not running")

// MarkGood commits the booted slot by hand.
func (a *Agent) MarkGood(ctx context.Context) error { return a.command(ctx, EvMarkGood{}) }

// MarkBad rejects the booted slot by hand and returns to the other one.
func (a *Agent) MarkBad(ctx context.Context) error { return a.command(ctx, EvMarkBad{}) }

func (a *Agent) command(ctx context.Context, ev Event) error {
	errc := make(chan error, 1)
	fn := func() {
		if _, bad := ev.(EvMarkBad); bad {
			if err := CanMarkBad(a.state); err != nil {
				errc <- err
				return
			}
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
	defer func() {
		a.stopWorkers()
		a.finishWaiters(err)
		for _, it := range a.inbox.take() {
			if it.reply != nil {
				it.reply <- ota.Outcome{Result: ota.ResultFailed, Code: ota.CodeCancelled, Message: "agent stopped before taking the offer"}
			}
		}
		if errors.Is(err, ErrRebooted) {
			err = nil
		}
	}()
	boot := EvBoot{Booted: booted, BootID: bootID}
	if a.state.Phase == ota.Staged {
		// Whether the flip happened decides between finishing it and a fallback.
		order, err := a.d.Bootloader.Order(ctx)
		if err != nil {
			return fmt.Errorf("bootloader: %w", err)
		}
		if len(order) > 0 {
			boot.FirstInOrder = order[0]
		}
	}
	if err := a.apply(ctx, boot); err != nil {
		return err
	}
	var beat, settle <-chan time.Time
	if a.cfg.Heartbeat != nil && a.cfg.HeartbeatEvery > 0 {
		t := time.NewTicker(a.cfg.HeartbeatEvery)
		defer t.Stop()
		beat = t.C
		a.cfg.Heartbeat()
	}
	for {
		var installDone, healthDone chan Event
		if a.install != nil {
			installDone = a.install.done
		}
		if a.health != nil {
			healthDone = a.health.done
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
		}
		if ev == nil {
			continue
		}
		if err := a.apply(ctx, ev); err != nil {
			return err
		}
	}
}

// takeOffers checks every queued offer, reports the refused ones, and hands
// the newest valid one to the machine: the older ones of the same batch are
// superseded before they could start anything.
func (a *Agent) takeOffers(ctx context.Context) error {
	items := a.inbox.take()
	var newest *Target
	// Waiters join after the refusals of this batch are applied, so those
	// steps do not answer them before their offer is taken.
	var waiting []*waiter
	for i, it := range items {
		facts := Facts{SecurityFloor: a.state.SecurityFloor, NewestIssuedAt: a.state.NewestIssuedAt, InactiveSlot: a.state.Booted.Other()}
		t, err := a.d.Checker.Check(it.raw, facts)
		if err != nil {
			if aerr := a.refuse(ctx, it, t, err); aerr != nil {
				a.inbox.requeue(items[i+1:])
				return aerr
			}
			continue
		}
		if it.reply != nil {
			waiting = append(waiting, &waiter{sha: t.SHA256(), reply: it.reply})
		}
		a.log.Info("offer accepted", "id", t.ID, "version", t.Version, "sha256", t.SHA256(), "source", it.key)
		if newest == nil || newer(t, *newest) {
			newest = &t
		}
	}
	if newest == nil {
		return nil
	}
	a.waiters = append(a.waiters, waiting...)
	return a.apply(ctx, EvOffer{Target: *newest})
}

// newer orders offers by issued_at, then digest, so every device picks the
// same one among offers issued at the same instant.
func newer(a, b Target) bool {
	if !a.IssuedAt.Equal(b.IssuedAt) {
		return a.IssuedAt.After(b.IssuedAt)
	}
	return a.SHA256() > b.SHA256()
}

func (a *Agent) refuse(ctx context.Context, it item, t Target, err error) error {
	code := ota.CodeOf(err)
	if code == "" {
		code = ota.CodeBadEnvelope
	}
	a.log.Warn("offer refused", "code", code, "err", err, "source", it.key)
	o := ota.Outcome{Result: ota.ResultRejected, Code: code, Message: err.Error()}
	if t.Payload.SHA256 != "" {
		o.ID, o.SHA256 = t.ID, t.SHA256()
	}
	aerr := a.apply(ctx, EvRefused{Outcome: o})
	if it.reply != nil {
		it.reply <- o
	}
	return aerr
}

// fatal is set by a command that stopped the loop (journal write failed,
// test crash, reboot that ends the process).
func (a *Agent) setFatal(err error) { a.fatal = err }

// apply steps the machine and carries out the effects in order.
func (a *Agent) apply(ctx context.Context, ev Event) error {
	next, fx := Step(a.state, a.cfg.Policy, ev)
	a.state = next
	var events []ota.Event
	for _, e := range fx {
		if a.cfg.Interrupt != nil {
			if err := a.cfg.Interrupt(e); err != nil {
				a.setFatal(err)
				return err
			}
		}
		err := a.exec(ctx, e, &events)
		if err == nil {
			continue
		}
		if errors.Is(err, ErrRebooted) || errors.Is(err, errJournal) {
			a.settleWaiters(events)
			a.setFatal(err)
			return err
		}
		// A bootloader operation failed: memory goes back to what the journal
		// says, and the machine decides from there.
		a.log.Error("effect failed", "effect", fmt.Sprintf("%T", e), "err", err)
		a.settleWaiters(events)
		a.state = a.persisted.Clone()
		return a.apply(ctx, EvEffectFailed{Effect: e, Message: err.Error()})
	}
	a.settleWaiters(events)
	return nil
}

var errJournal = errors.New("journal write failed")

func (a *Agent) exec(ctx context.Context, e Effect, events *[]ota.Event) error {
	switch e := e.(type) {
	case Persist:
		if err := a.d.Store.Save(e.State); err != nil {
			return fmt.Errorf("%w: %w", errJournal, err)
		}
		a.persisted = e.State.Clone()
	case Emit:
		*events = append(*events, e.Event)
		a.publish(e)
	case Mark:
		mctx, cancel := context.WithTimeout(ctx, a.cfg.EffectTimeout)
		defer cancel()
		var err error
		switch e.Op {
		case MarkBad:
			err = a.d.Bootloader.MarkBad(mctx, e.Slot)
		case MarkActive:
			err = a.d.Bootloader.MarkActive(mctx, e.Slot)
		case MarkGood:
			err = a.d.Bootloader.MarkGood(mctx, e.Slot)
		}
		if err != nil {
			return fmt.Errorf("bootloader: mark %s %s: %w", e.Slot, e.Op, err)
		}
		a.log.Info("bootloader", "mark", e.Op, "slot", e.Slot)
	case StartInstall:
		a.startInstall(e)
	case CancelInstall:
		a.stopInstall()
	case Reboot:
		a.log.Info("rebooting")
		return a.d.Rebooter.Reboot(ctx)
	case StartHealth:
		a.startHealth()
	case PublishProgress:
		a.publishProgress(e)
	}
	return nil
}

func (a *Agent) startInstall(e StartInstall) {
	a.stopInstall()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan Event, 1)}
	a.install = r
	a.lastBytes, a.lastAt = 0, a.d.Clock.Now()
	gen := e.Gen
	go func() {
		err := a.d.Installer.Install(ctx, e.Target, func(verifying bool, done, total int64) {
			a.latest.Store(&EvProgress{Gen: gen, Verifying: verifying, BytesDone: done, Total: total})
			select {
			case a.progress <- struct{}{}:
			default:
			}
		})
		ev := EvInstallDone{Gen: gen}
		if err != nil {
			ev.Code, ev.Message = ota.CodeOf(err), err.Error()
			if ev.Code == "" {
				ev.Code = ota.CodeWriteFailed
			}
		}
		r.done <- ev
	}()
}

// stopInstall cancels the writer and waits until it has stopped: there is
// never more than one writer of a slot.
func (a *Agent) stopInstall() {
	if a.install == nil {
		return
	}
	a.install.cancel()
	<-a.install.done
	a.install = nil
}

func (a *Agent) startHealth() {
	if a.health != nil {
		a.health.cancel()
		<-a.health.done
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.cfg.CommitWindow)
	r := &running{cancel: cancel, done: make(chan Event, 1)}
	a.health = r
	go func() {
		defer cancel()
		err := a.d.Health.Check(ctx)
		ev := EvHealth{OK: err == nil}
		if err != nil {
			ev.Message = err.Error()
		}
		r.done <- ev
	}()
}

func (a *Agent) stopWorkers() {
	a.stopInstall()
	if a.health != nil {
		a.health.cancel()
		<-a.health.done
		a.health = nil
	}
}

func (a *Agent) publish(e Emit) {
	now := a.d.Clock.Now()
	st := Snapshot(a.cfg.DeviceID, a.cfg.AgentVersion, e.State, now)
	a.mu.Lock()
	a.status = st
	a.mu.Unlock()
	ev := e.Event
	ev.Device, ev.BootID, ev.Time = a.cfg.DeviceID, e.State.BootID, now.UTC()
	a.log.Info("transition", "seq", ev.Seq, "from", ev.From, "to", ev.To, "id", ev.ID,
		"result", ev.Result, "code", ev.Code, "msg", ev.Message)
	for _, p := range a.d.Publishers {
		p.Publish(st, ev)
	}
}

func (a *Agent) publishProgress(e PublishProgress) {
	now := a.d.Clock.Now()
	var rate float64
	if dt := now.Sub(a.lastAt).Seconds(); dt > 0 {
		rate = float64(e.BytesDone-a.lastBytes) / dt
	}
	a.lastBytes, a.lastAt = e.BytesDone, now
	a.mu.Lock()
	if a.status.Target != nil {
		// Copy: snapshots handed out by Status share the old pointer.
		t := *a.status.Target
		t.BytesDone = e.BytesDone
		a.status.Target = &t
	}
	a.mu.Unlock()
	msg := ota.Progress{Device: a.cfg.DeviceID, ID: e.Target.ID, SHA256: e.Target.SHA256(),
		BytesDone: e.BytesDone, BytesTotal: e.Total, BytesPerSecond: rate}
	for _, p := range a.d.Publishers {
		p.Progress(msg)
	}
}

// settleWaiters answers the Install callers whose offer came to an end.
func (a *Agent) settleWaiters(events []ota.Event) {
	keep := a.waiters[:0]
	for _, w := range a.waiters {
		if o, ok := a.outcomeFor(w.sha, events); ok {
			w.reply <- o
			continue
		}
		keep = append(keep, w)
	}
	a.waiters = keep
}

func (a *Agent) outcomeFor(sha string, events []ota.Event) (ota.Outcome, bool) {
	for _, ev := range events {
		if ev.Result != "" && ev.SHA256 == sha {
			return ota.Outcome{Result: ev.Result, Code: ev.Code, Message: ev.Message, ID: ev.ID, SHA256: sha}, true
		}
	}
	s := a.state
	if t := s.Target; t != nil && t.SHA256() == sha {
		switch s.Phase {
		case ota.Staged, ota.Rebooting, ota.Confirming:
			return ota.Outcome{Result: ota.ResultStaged, ID: t.ID, SHA256: sha, Message: "slot " + string(t.Slot) + " is primary"}, true
		}
		return ota.Outcome{}, false
	}
	if p := s.Pending; p != nil && p.SHA256() == sha {
		cur := s.Target
		return ota.Outcome{Result: ota.ResultPending, ID: p.ID, SHA256: sha,
			Message: "accepted; installs once " + cur.ID + " is settled (" + string(s.Phase) + ")"}, true
	}
	if r := s.LastResult; r != nil && r.SHA256 == sha {
		return ota.Outcome{Result: r.Result, Code: r.Code, Message: r.Message, ID: r.ID, SHA256: sha}, true
	}
	return ota.Outcome{Result: ota.ResultSuperseded, SHA256: sha, Message: "a newer offer took its place"}, true
}

func (a *Agent) finishWaiters(err error) {
	a.settleWaiters(nil)
	for _, w := range a.waiters {
		msg := "agent stopped before the install finished"
		if err != nil {
			msg += ": " + err.Error()
		}
		w.reply <- ota.Outcome{Result: ota.ResultFailed, Code: ota.CodeCancelled, Message: msg, SHA256: w.sha}
	}
	a.waiters = nil
}

// inbox is the queue in front of the state machine. Puts never block.
type inbox struct {
	mu    sync.Mutex
	items []item
	wake  chan struct{}
}

type item struct {
	key   string
	raw   []byte
	reply chan ota.Outcome
}

func newInbox() *inbox { return &inbox{wake: make(chan struct{}, 1)} }

// maxPerSource bounds what one network source (topic) can queue before the
// loop takes it: the oldest goes first. Every queued offer is checked and
// the newest valid one wins, so the order of arrival does not decide.
const maxPerSource = 16

func (q *inbox) put(key string, raw []byte, reply chan ota.Outcome) {
	q.mu.Lock()
	if key != "" {
		n, first := 0, -1
		for i := range q.items {
			if q.items[i].key == key {
				if first < 0 {
					first = i
				}
				n++
			}
		}
		if n >= maxPerSource {
			q.items = append(q.items[:first], q.items[first+1:]...)
		}
	}
	q.items = append(q.items, item{key: key, raw: raw, reply: reply})
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *inbox) requeue(items []item) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.items = append(append([]item(nil), items...), q.items...)
}

// hasLocal reports a queued local install, which someone waits for.
func (q *inbox) hasLocal() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, it := range q.items {
		if it.key == "" {
			return true
		}
	}
	return false
}

func (q *inbox) take() []item {
	q.mu.Lock()
	defer q.mu.Unlock()
	it := q.items
	q.items = nil
	return it
}
