package devicetest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/otad/otad/agent"
	"github.com/otad/otad/bootctl/sim"
	"github.com/otad/otad/device/node"
	"github.com/otad/otad/device/statelock"
	"github.com/otad/otad/ota"
)

// Instance is one run of the agent process on the Testbed.
type Instance struct {
	D    *node.Node
	lock *statelock.Lock
	done chan error
	Stop context.CancelFunc
}

// ErrEnded is what Done delivers when a part ended the agent's goroutine
// (runtime.Goexit) instead of returning: a fault injected as a crash.
var ErrEnded = errors.New("agent goroutine ended without returning (simulated crash)")

// Start runs the agent on the Testbed's files, as `otad run` would. wrap,
// if set, may replace or wrap the parts (node.Build) before the agent is
// assembled on them.
func (tb *Testbed) Start(wrap func(*node.Parts)) *Instance {
	tb.T.Helper()
	lock, err := statelock.Acquire(tb.Cfg.StateDir)
	Must(tb.T, err)
	opt := node.Options{AgentVersion: "test", Logger: slog.New(slog.DiscardHandler), Clock: tb.Clock, BeforeWrite: tb.BeforeWrite}
	p, err := node.Build(tb.Cfg, opt)
	var n *node.Node
	if err == nil {
		if wrap != nil {
			wrap(p)
		}
		n, err = node.Assemble(tb.Cfg, p, opt)
	}
	if err != nil {
		lock.Release()
		tb.T.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	in := &Instance{D: n, lock: lock, done: make(chan error, 1), Stop: cancel}
	go func() {
		err := ErrEnded // unless Run returns
		defer func() {
			lock.Release()
			in.done <- err
		}()
		err = n.Run(ctx)
	}()
	return in
}

// Done delivers Run's result once.
func (in *Instance) Done() <-chan error { return in.done }

// Wait waits for Run to return.
func (in *Instance) Wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-in.done:
		return err
	case <-time.After(60 * time.Second):
		t.Fatal("agent did not stop")
		return nil
	}
}

func (tb *Testbed) Sim() *sim.Sim {
	s, err := sim.Open(tb.Cfg.Bootloader.EnvFile, tb.Cfg.Bootloader.Attempts)
	Must(tb.T, err)
	return s
}

func (tb *Testbed) Journal() agent.State {
	s, _, err := agent.Journal{Dir: tb.Cfg.StateDir}.Load()
	Must(tb.T, err)
	return s
}

func FileSHA(t *testing.T, path string, n int64) string {
	f, err := os.Open(path)
	Must(t, err)
	defer f.Close()
	h := sha256.New()
	_, err = io.CopyN(h, f, n)
	Must(t, err)
	return hex.EncodeToString(h.Sum(nil))
}

// settle runs agents (restarting them after each simulated reboot) until the
// device is idle with an outcome, and returns the journal.
// Like a retained MQTT offer, env is delivered again on every start.
func (tb *Testbed) Settle(label string, env []byte) agent.State {
	tb.T.Helper()
	for range 10 {
		in := tb.Start(nil)
		if env != nil {
			go in.D.Agent.Install(context.Background(), env)
		}
		deadline := time.Now().Add(60 * time.Second)
		stopped := false
		for !stopped && time.Now().Before(deadline) {
			select {
			case err := <-in.done:
				Must(tb.T, err)
				stopped = true // the sim device rebooted
			case <-time.After(20 * time.Millisecond):
				if st := in.D.Agent.Status(); st.State == ota.Idle && st.LastResult != nil {
					in.Stop()
					Must(tb.T, in.Wait(tb.T))
					return tb.Journal()
				}
			}
		}
		if !stopped {
			tb.T.Fatalf("%s: device did not settle: %+v", label, in.D.Agent.Status())
		}
	}
	tb.T.Fatalf("%s: device kept rebooting", label)
	return agent.State{}
}

// checkBootable powers the sim device on and checks that the slot it picks
// holds what the journal says it holds.
func (tb *Testbed) CheckBootable(label string) {
	tb.T.Helper()
	s := tb.Sim()
	slot, err := s.Boot()
	Must(tb.T, err)
	j := tb.Journal()
	path := tb.Cfg.Slots.Devices()[slot]
	info := j.Slots[slot]
	switch {
	case slot == "A" && info.SHA256 == "":
		if got, want := FileSHA(tb.T, path, int64(len(tb.Factory))), hex.EncodeToString(sha(tb.Factory)); got != want {
			tb.T.Fatalf("%s: booted A, and A no longer holds the factory image", label)
		}
	case info.SHA256 == "" || (info.Status != ota.SlotGood && info.Status != ota.SlotStaged):
		tb.T.Fatalf("%s: booted slot %s, which the journal does not vouch for (%+v)", label, slot, info)
	default:
		if got := FileSHA(tb.T, path, ImageSize); got != info.SHA256 {
			tb.T.Fatalf("%s: booted slot %s holds %s, journal says %s", label, slot, got[:12], info.SHA256[:12])
		}
	}
}

func sha(b []byte) []byte { s := sha256.Sum256(b); return s[:] }
