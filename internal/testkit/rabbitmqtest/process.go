package rabbitmqtest

import (
	"context"
	"fmt"
	"os/exec"
	"syscall"
	"time"

	"github.com/otad/otad/internal/testkit/testtool"
)

// startTimeout bounds a node's start: an Erlang VM and the broker's boot
// take 5 to 20 s on a busy machine.
const startTimeout = 2 * time.Minute

// node is one rabbitmq-server process group of ours.
type node struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the server process has exited
}

// launch runs the server in a process group of its own and waits until its
// MQTT listener takes connections on 127.0.0.1:port.
func launch(bin string, env []string, port int, out *testtool.Buffer) (*node, error) {
	n := &node{cmd: exec.Command(bin), done: make(chan struct{})}
	n.cmd.Env = env
	n.cmd.Stdout, n.cmd.Stderr = out, out
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := n.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start rabbitmq-server: %w", err)
	}
	go func() { _ = n.cmd.Wait(); close(n.done) }()
	if err := testtool.WaitListening(context.Background(), n.cmd, n.done, port, startTimeout, out); err != nil {
		n.stop()
		return nil, err
	}
	return n, nil
}

// stop waits for the server to end (after rabbitmqctl stop), then kills its
// whole process group (the Erlang VM's helpers too) so nothing is left.
func (n *node) stop() {
	select {
	case <-n.done:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-n.done:
		case <-time.After(10 * time.Second):
		}
	}
	_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
	<-n.done
}
