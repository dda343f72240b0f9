package rabbitmqtest

import (
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"syscall"
	"time"
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
func launch(bin string, env []string, port int, out io.Writer) (*node, error) {
	n := &node{cmd: exec.Command(bin), done: make(chan struct{})}
	n.cmd.Env = env
	n.cmd.Stdout, n.cmd.Stderr = out, out
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := n.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start rabbitmq-server: %w", err)
	}
	go func() { _ = n.cmd.Wait(); close(n.done) }()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(startTimeout)
	for {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return n, nil
		}
		select {
		case <-n.done:
			return nil, fmt.Errorf("rabbitmq-server exited at start (%v): %s", n.cmd.ProcessState, out)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			n.stop()
			return nil, fmt.Errorf("rabbitmq MQTT listener not up on %s after %v: %s", addr, startTimeout, out)
		}
	}
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
