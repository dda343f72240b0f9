package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/otad/otad/ota"
)

type running struct {
	cancel context.CancelFunc
	done   chan Event
}

// fatal is set by a command that stopped the loop (journal write failed,
// reboot that ends the process).
func (a *Agent) setFatal(err error) { a.fatal = err }

// apply steps the machine and carries out the effects in order.
func (a *Agent) apply(ctx context.Context, ev Event) error {
	next, fx := Step(a.state, a.cfg.Policy, a.d.Clock.Now().UTC(), ev)
	a.state = next
	var events []ota.Event
	for _, e := range fx {
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
		// Waiters hear from the step that handles the failure: settled now,
		// an install whose flip failed would be answered "staged".
		a.log.Error("effect failed", "effect", fmt.Sprintf("%T", e), "err", err)
		a.state = a.persisted.Clone()
		return a.apply(ctx, EvEffectFailed{Effect: e, Message: err.Error(), Code: ota.CodeOf(err)})
	}
	a.settleWaiters(events)
	if a.recheck {
		a.recheck = false
		return a.recheckPending(ctx)
	}
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
			if err = a.checkTrust(e.Slot); err == nil {
				err = a.d.Bootloader.MarkActive(mctx, e.Slot)
			}
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
	case RecheckPending:
		a.recheck = true // once this batch's effects are done
	case StartHealth:
		a.startHealth(e)
	case PublishProgress:
		a.publishProgress(e)
	case RetryLater:
		a.retryLater(e.Target)
	}
	return nil
}

// checkTrust checks the signatures of the install about to become primary
// in slot again, with the keys trusted now (TrustChecker).
func (a *Agent) checkTrust(slot ota.Slot) error {
	tc, ok := a.d.Checker.(TrustChecker)
	t := a.state.Target
	if !ok || t == nil || t.Slot != slot || len(t.Envelope) == 0 {
		return nil
	}
	if err := tc.CheckTrust(t.Envelope); err != nil {
		return fmt.Errorf("the flip to slot %s was refused: %w", slot, err)
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
		var last ota.Transfer // the writer may report from goroutines of its own
		var mu sync.Mutex
		err := a.d.Installer.Install(ctx, InstallJob{Target: e.Target, Booted: e.Booted}, func(p ota.Progress) {
			mu.Lock()
			last = p.Transfer
			mu.Unlock()
			a.latest.Store(&EvProgress{Gen: gen, Progress: p})
			select {
			case a.progress <- struct{}{}:
			default:
			}
		})
		mu.Lock()
		ev := EvInstallDone{Gen: gen, Transfer: last}
		mu.Unlock()
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

// startHealth runs the health check for what is left of the commit
// window, used of it having run already: a crash-looping agent cannot keep
// a slot uncommitted for ever by starting the window again each time. The
// window is running time, never the wall clock (runtime.go).
func (a *Agent) startHealth(e StartHealth) {
	a.stopHealth()
	left := a.cfg.CommitWindow - e.Used
	r := &running{cancel: func() {}, done: make(chan Event, 1)}
	a.health = r
	if left <= 0 {
		r.done <- windowEnded(a.cfg.CommitWindow, e.Used, e.Since)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), left)
	r.cancel = cancel
	go func() {
		defer cancel()
		err := a.d.Health.Check(ctx)
		ev := EvHealth{OK: err == nil}
		switch {
		case err != nil && ctx.Err() == context.DeadlineExceeded:
			ev = windowEnded(a.cfg.CommitWindow, a.cfg.CommitWindow, e.Since)
			ev.Message += ": " + err.Error()
		case err != nil:
			ev.Message = err.Error()
		}
		r.done <- ev
	}()
}

// stopHealth cancels the running health check and waits until it has stopped.
func (a *Agent) stopHealth() {
	if a.health == nil {
		return
	}
	a.health.cancel()
	<-a.health.done
	a.health = nil
}

func (a *Agent) stopWorkers() {
	a.stopInstall()
	a.stopHealth()
	a.stopRetry()
}

func (a *Agent) publish(e Emit) {
	now := a.d.Clock.Now()
	st := a.snapshot(e.State, now)
	a.mu.Lock()
	a.status = st
	a.confirming, a.bootID = RunTime{}, e.State.BootID
	if t := e.State.Target; t != nil {
		a.confirming = t.Confirming
	}
	a.mu.Unlock()
	ev := forOperatorEvent(e.Event, a.cfg.Policy)
	ev.Device, ev.BootID, ev.Time = a.cfg.DeviceID, e.State.BootID, now.UTC()
	if ev.Seq == 0 {
		a.log.Debug("status refreshed", "trust_version", st.TrustVersion)
	} else {
		a.log.Info("transition", "seq", ev.Seq, "from", ev.From, "to", ev.To, "id", ev.ID,
			"result", ev.Result, "code", ev.Code, "msg", ev.Message)
	}
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
		t.BytesDone, t.Transfer, t.Waiting = e.BytesDone, e.Transfer, e.Waiting
		a.status.Target = &t
	}
	a.mu.Unlock()
	msg := e.Progress
	msg.Device, msg.ID, msg.SHA256, msg.BytesPerSecond = a.cfg.DeviceID, e.Target.ID, e.Target.SHA256(), rate
	for _, p := range a.d.Publishers {
		p.Progress(msg)
	}
}

// snapshot is the status snapshot with what the agent's config adds.
func (a *Agent) snapshot(s State, now time.Time) ota.Status {
	st := ForOperator(Snapshot(a.cfg.DeviceID, a.cfg.AgentVersion, s, now), a.cfg.Policy)
	if s.Target != nil {
		st = WithWindowLeft(st, s.Target.Confirming, a.cfg.CommitWindow, s.BootID, a.d.Uptime.Uptime())
	}
	st.Groups = a.cfg.Groups
	if a.cfg.TrustVersion != nil {
		st.TrustVersion = a.cfg.TrustVersion()
	}
	return st
}
