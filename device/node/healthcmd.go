package node

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// healthWaitDelay bounds the wait for a health command's output once it has
// exited or been killed: a grandchild that keeps the pipe open (a daemon
// started by the check) must not keep the agent in confirming for good.
const healthWaitDelay = 2 * time.Second

// maxHealthOutput is how much of a check's output is kept (its tail).
const maxHealthOutput = 4096

// runHealthCommand runs argv once in its own process group. At the deadline
// (the commit window) the whole group is killed, not just the child, and the
// wait for its output is bounded; any process it leaves behind is killed too.
// Anything but a clean exit 0 is a failed check.
func runHealthCommand(ctx context.Context, argv []string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return killGroup(cmd) }
	cmd.WaitDelay = healthWaitDelay
	out := &tailBuffer{max: maxHealthOutput}
	cmd.Stdout, cmd.Stderr = out, out
	err := cmd.Run()
	if cmd.Process != nil {
		killGroup(cmd) // stragglers of a check that exited
	}
	if errors.Is(err, exec.ErrWaitDelay) {
		err = fmt.Errorf("exited, but its output stayed open past %v (a process it started holds it): %w", healthWaitDelay, err)
	}
	return out.bytes(), err
}

func killGroup(cmd *exec.Cmd) error {
	return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
}

// tailBuffer keeps the last max bytes written: a chatty check cannot grow
// the agent's memory.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]byte(nil), t.b...)
}
