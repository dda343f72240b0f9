package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// broker is one mosquitto process of our own on a free loopback port. It
// never touches a system broker service.
type broker struct {
	URL  string // mqtt://127.0.0.1:PORT
	Port int
	cmd  *exec.Cmd
	done chan struct{} // closed when mosquitto has exited
	log  *tailBuffer
}

// brokerBinary finds mosquitto; Debian puts it in /usr/sbin, which is not on
// every PATH.
func brokerBinary() (string, error) {
	if p, err := exec.LookPath("mosquitto"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/mosquitto"); err == nil {
		return "/usr/sbin/mosquitto", nil
	}
	return "", fmt.Errorf("mosquitto not found: apt-get install mosquitto")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	return port, l.Close()
}

// startBroker writes dir/mosquitto.conf and runs mosquitto until Stop.
func startBroker(ctx context.Context, dir string, nodelay bool) (*broker, error) {
	bin, err := brokerBinary()
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	lines := []string{
		"listener " + strconv.Itoa(port) + " 127.0.0.1",
		"allow_anonymous true",
		// The observers subscribe to every device's status: a rollout's burst
		// must not overflow their queues (the default is 1000).
		"max_queued_messages 10000",
		// Only trouble: a line per client connection would be the whole log.
		"log_dest stderr",
		"log_type error",
		"log_type warning",
		"connection_messages false",
	}
	if nodelay {
		lines = append(lines, "set_tcp_nodelay true")
	}
	if os.Geteuid() == 0 {
		// As root mosquitto drops to user "mosquitto", which cannot read dir.
		lines = append(lines, "user root")
	}
	conf := filepath.Join(dir, "mosquitto.conf")
	if err := os.WriteFile(conf, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("mosquitto config: %w", err)
	}
	b := &broker{URL: fmt.Sprintf("mqtt://127.0.0.1:%d", port), Port: port, log: &tailBuffer{max: 16 << 10}, done: make(chan struct{})}
	b.cmd = exec.Command(bin, "-c", conf)
	b.cmd.Stdout, b.cmd.Stderr = b.log, b.log
	if err := b.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start mosquitto: %w", err)
	}
	go func() { _ = b.cmd.Wait(); close(b.done) }()

	wait, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for {
		var d net.Dialer
		if c, err := d.DialContext(wait, "tcp", addr); err == nil {
			c.Close()
			return b, nil
		}
		select {
		case <-b.done:
			return nil, fmt.Errorf("mosquitto exited at start (%v): %s", b.cmd.ProcessState, b.log)
		case <-wait.Done():
			b.Stop()
			return nil, fmt.Errorf("mosquitto not listening on %s after 10s: %s", addr, b.log)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// PID is mosquitto's process ID, for its memory figures.
func (b *broker) PID() int { return b.cmd.Process.Pid }

// Exited reports whether mosquitto has stopped (it should not before Stop).
func (b *broker) Exited() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

// Stop ends mosquitto, gracefully if it lets itself be.
func (b *broker) Stop() {
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.done:
	case <-time.After(10 * time.Second):
		_ = b.cmd.Process.Kill()
		<-b.done
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   bytes.Buffer
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b.Write(p)
	if over := t.b.Len() - t.max; over > 0 {
		t.b.Next(over)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(t.b.String())
}
