package rabbitmqtest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/otad/otad/internal/testkit/testtool"
)

// startTimeout bounds a node's start: an Erlang VM and the broker's boot
// take 5 to 20 s on a busy machine.
const startTimeout = 2 * time.Minute

// node is one rabbitmq-server process group of ours.
type node struct {
	cmd   *exec.Cmd
	done  chan struct{} // closed when the server process has exited
	ready *lineCount    // its log's lines saying the MQTT listener is up
	conns *connLog      // the MQTT clients its log says it accepted
}

// connLog remembers, from a node's log as it is written, when it accepted
// each MQTT client ID.
type connLog struct {
	mu       sync.Mutex
	partial  []byte
	accepted map[string]time.Time
}

func (c *connLog) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	buf := append(c.partial, p...)
	for {
		i := bytes.IndexByte(buf, '\n')
		if i < 0 {
			break
		}
		line := string(buf[:i])
		buf = buf[i+1:]
		if !strings.Contains(line, "accepting MQTT connection") {
			continue
		}
		if _, id, ok := strings.Cut(line, "client id: "); ok {
			c.accepted[strings.TrimSuffix(strings.TrimSpace(id), ")")] = time.Now()
		}
	}
	c.partial = append([]byte(nil), buf...)
	return len(p), nil
}

func (c *connLog) at(id string) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.accepted[id]
}

// lineCount counts the occurrences of a line in a stream written to it,
// wherever the writes split it.
type lineCount struct {
	line string
	mu   sync.Mutex
	tail []byte
	n    int
}

func (c *lineCount) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	buf := append(c.tail, p...)
	c.n += strings.Count(string(buf), c.line)
	// Keep what could start an occurrence the next write completes (too
	// short to hold a whole one, so none is counted twice).
	keep := min(len(buf), len(c.line)-1)
	c.tail = append([]byte(nil), buf[len(buf)-keep:]...)
	return len(p), nil
}

func (c *lineCount) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// launch runs the server in a process group of its own and waits until its
// own log says its MQTT listener is up on 127.0.0.1:port. A connection to
// the port proves nothing: another process may have taken the port
// between its pick and the node's bind (the node then fails to boot,
// eaddrinuse), and the connection would reach that one.
func launch(bin, dir string, env []string, port int, out *testtool.Buffer) (*node, error) {
	n := &node{cmd: exec.Command(bin), done: make(chan struct{}),
		ready: &lineCount{line: fmt.Sprintf("started MQTT TCP listener on 127.0.0.1:%d", port)},
		conns: &connLog{accepted: map[string]time.Time{}}}
	// Erlang writes its crash dumps (MnesiaCore.*) where it runs: the test's
	// directory, never the package's.
	n.cmd.Env, n.cmd.Dir = env, dir
	w := io.MultiWriter(out, n.ready, n.conns)
	n.cmd.Stdout, n.cmd.Stderr = w, w
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := n.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start rabbitmq-server: %w", err)
	}
	go func() { _ = n.cmd.Wait(); close(n.done) }()
	if err := n.waitListener(port, 1, out); err != nil {
		n.stop()
		return nil, err
	}
	return n, nil
}

// waitListener waits until out holds the n-th line saying the node's MQTT
// listener is up on port (a node that joins a cluster starts it again),
// and the port takes connections.
func (n *node) waitListener(port, times int, out *testtool.Buffer) error {
	deadline := time.After(startTimeout)
	for n.ready.count() < times {
		select {
		case <-n.done:
			return fmt.Errorf("rabbitmq-server exited before its MQTT listener was up (%v): %s", n.cmd.ProcessState, out)
		case <-deadline:
			return fmt.Errorf("rabbitmq-server: no %q in its log after %v: %s", n.ready.line, startTimeout, out)
		case <-time.After(50 * time.Millisecond):
		}
	}
	return testtool.WaitListening(context.Background(), n.cmd, n.done, port, startTimeout, out)
}

// kill ends the node's whole process group at once (SIGKILL): a node lost.
func (n *node) kill() {
	_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
	<-n.done
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
