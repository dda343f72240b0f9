package mosquittotest

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"syscall"
	"time"

	"github.com/otad/otad/internal/testkit/testtool"
)

// Binary finds mosquitto.
func Binary() (string, error) { return testtool.Find("mosquitto", "mosquitto") }

// Port returns a loopback TCP port that was free a moment ago.
func Port() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	return port, l.Close()
}

// process is one mosquitto process of our own, on a loopback port.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when mosquitto has exited
}

// launch runs `bin -c conf` and waits (at most 10 s, and while ctx lasts)
// until it listens on 127.0.0.1:port; its output goes to out.
func launch(ctx context.Context, bin, conf string, port int, out *testtool.Buffer) (*process, error) {
	p := &process{cmd: exec.Command(bin, "-c", conf), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = out, out
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start mosquitto: %w", err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	if err := testtool.WaitListening(ctx, p.cmd, p.done, port, 10*time.Second, out); err != nil {
		p.Stop()
		return nil, err
	}
	return p, nil
}

// exited reports whether mosquitto has stopped.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop ends mosquitto gracefully (it saves its persistence file), or kills
// it after 10 s.
func (p *process) Stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}
