package main

import (
	"bufio"
	"context"
	"fmt"
	"github.com/otad/otad/verify"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/otad/otad/rollout"
)

// controllerRun starts `otactl rollout start` processes.
type controllerRun struct {
	bin, broker, dir string
	settle, lease    time.Duration
	op               operatorKey
	queue            int // --broker-queue: the broker's limit for a client, as the controller is told
}

// operatorKey is the key the controllers sign the control plane with
// (docs/contract/rollouts.md): its files, and the trust in it.
type operatorKey struct {
	key, pub string
	trust    rollout.Trust
}

func newOperatorKey(dir string) (operatorKey, error) {
	k, err := verify.GenerateKey(verify.KeyEd25519)
	if err != nil {
		return operatorKey{}, err
	}
	priv, err := verify.MarshalPrivateKeyPEM(k)
	if err != nil {
		return operatorKey{}, err
	}
	pub, err := verify.MarshalPublicKeyPEM(k.Public())
	if err != nil {
		return operatorKey{}, err
	}
	o := operatorKey{key: filepath.Join(dir, "operator.key"), pub: filepath.Join(dir, "operator.pub"),
		trust: rollout.Trust{Keys: verify.NewKeyring(verify.Key{Public: k.Public()})}}
	if err := os.WriteFile(o.key, priv, 0o600); err != nil {
		return operatorKey{}, err
	}
	return o, os.WriteFile(o.pub, pub, 0o644)
}

// proc is one controller process, its output in a file of its own.
type proc struct {
	cmd     *exec.Cmd
	log     string
	started time.Time
	done    chan struct{}
	hwm     atomic.Int64 // its VmHWM in KiB, the highest read (sample)
}

func (c controllerRun) start(ctx context.Context, plan, tag string) (*proc, error) {
	p := &proc{log: filepath.Join(c.dir, tag+".log"), done: make(chan struct{})}
	f, err := os.Create(p.log)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.CommandContext(ctx, c.bin, "rollout", "start", "--broker", c.broker, "--operator-key", c.op.key, "--trust", c.op.pub, "--settle", c.settle.String(),
		"--tick", "1s", "--lease", c.lease.String(), "--broker-queue", strconv.Itoa(c.queue), plan)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	p.started = time.Now()
	if err := p.cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	go func() { _ = p.cmd.Wait(); f.Close(); close(p.done) }()
	go p.sample()
	return p, nil
}

// sample reads the controller's VmHWM every 50 ms until it exits. wait4's
// maxrss is no good here: os/exec starts it with vfork, and Linux counts
// the parent's peak RSS at exec time (this benchmark's, holding a fake
// fleet of a million) into the child's maxrss. VmHWM only grows, so the
// last reading misses at most the last 50 ms.
func (p *proc) sample() {
	pid := p.cmd.Process.Pid
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if m, err := procStatus(pid, "VmHWM"); err == nil && m["VmHWM"] > p.hwm.Load() {
			p.hwm.Store(m["VmHWM"])
		}
		select {
		case <-p.done:
			return
		case <-tick.C:
		}
	}
}

// peak is the process's peak RSS in KiB, as last sampled.
func (p *proc) peak() int64 {
	if m, err := procStatus(p.cmd.Process.Pid, "VmHWM"); err == nil && m["VmHWM"] > p.hwm.Load() {
		p.hwm.Store(m["VmHWM"]) // still running (a zombie has no VmHWM)
	}
	return p.hwm.Load()
}

func (p *proc) signal(sig syscall.Signal) (int64, error) {
	p.peak() // its last reading, before the signal ends it
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
		return p.peak(), nil
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		return p.peak(), fmt.Errorf("controller did not stop on %v:\n%s", sig, p.tail())
	}
}

func (p *proc) kill() (int64, error) { return p.signal(syscall.SIGKILL) }
func (p *proc) stop() (int64, error) { return p.signal(syscall.SIGTERM) }

// wait waits for the controller to end by itself; an exit other than 0 is
// an error.
func (p *proc) wait(timeout time.Duration) (int64, error) {
	select {
	case <-p.done:
	case <-time.After(timeout):
		return p.kill()
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		return p.peak(), fmt.Errorf("controller exited %d:\n%s", code, p.tail())
	}
	return p.peak(), nil
}

// fail ends the controller and returns err with its output's tail.
func (p *proc) fail(err error) error {
	_, _ = p.kill()
	return fmt.Errorf("%w\ncontroller output:\n%s", err, p.tail())
}

func (p *proc) tail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// waitLog waits until the controller's output holds line.
func (p *proc) waitLog(ctx context.Context, line string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if b, err := os.ReadFile(p.log); err == nil && strings.Contains(string(b), line) {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("controller exited before %q", line)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no %q after %v", line, timeout)
		}
	}
}

// watcher follows every rollout's state as the broker delivers it.
type watcher struct {
	c       paho.Client
	mu      sync.Mutex
	latest  map[string]rollout.State
	largest map[string]int
}

func watchStates(broker string, trust rollout.Trust) (*watcher, error) {
	w := &watcher{latest: map[string]rollout.State{}, largest: map[string]int{}}
	o := paho.NewClientOptions().AddBroker(strings.Replace(broker, "mqtt://", "tcp://", 1)).SetClientID("rolloutbench-states")
	w.c = paho.NewClient(o)
	if tok := w.c.Connect(); !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
		return nil, fmt.Errorf("state watcher: %v", tok.Error())
	}
	tok := w.c.Subscribe("ota/rollouts/+/state", 0, func(_ paho.Client, m paho.Message) {
		s, _, err := trust.OpenState(m.Topic(), m.Payload())
		if err != nil {
			return
		}
		w.mu.Lock()
		w.latest[s.Name] = s
		w.largest[s.Name] = max(w.largest[s.Name], len(m.Payload()))
		w.mu.Unlock()
	})
	if !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
		return nil, fmt.Errorf("state watcher: %v", tok.Error())
	}
	return w, nil
}

func (w *watcher) close() { w.c.Disconnect(100) }

func (w *watcher) largestOf(name string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.largest[name]
}

// wait waits until name's latest state satisfies ok, while its controller p runs.
func (w *watcher) wait(ctx context.Context, p *proc, name string, timeout time.Duration, ok func(rollout.State) bool) (rollout.State, error) {
	deadline := time.Now().Add(timeout)
	for {
		w.mu.Lock()
		s, found := w.latest[name]
		w.mu.Unlock()
		if found && ok(s) {
			return s, nil
		}
		if time.Now().After(deadline) {
			return s, fmt.Errorf("rollout %s: not there after %v (%s, wave %d, %+v)", name, timeout, s.Phase, s.Wave, s.Counts)
		}
		select {
		case <-ctx.Done():
			return s, ctx.Err()
		case <-p.done:
			return s, fmt.Errorf("rollout %s: its controller exited first (%s, wave %d)", name, s.Phase, s.Wave)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// procStatus reads the kB figures of keys from /proc/PID/status.
func procStatus(pid int, keys ...string) (map[string]int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		for _, k := range keys {
			if name == k {
				v, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
				if err != nil {
					return nil, fmt.Errorf("/proc/%d/status %s: %w", pid, k, err)
				}
				out[k] = v
			}
		}
	}
	return out, sc.Err()
}
