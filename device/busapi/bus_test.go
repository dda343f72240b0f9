package busapi

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/otad/otad/internal/testkit/testtool"
	"github.com/otad/otad/ota"
)

// openBus is a bus that lets anyone own and call anything: these tests
// are about otad on a bus, not the shipped policy (device/daemon's test
// runs that).
const openBus = `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <listen>unix:path=SOCKET</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
`

// testBus is a real dbus-daemon on a socket of the test's, which can be
// killed and started again at the same address.
type testBus struct {
	t          *testing.T
	bin, conf  string
	sock, addr string
	stopDaemon func()
}

func newTestBus(t *testing.T) *testBus {
	t.Helper()
	b := &testBus{t: t, bin: testtool.Require(t, "dbus-daemon", "dbus-daemon")}
	dir := t.TempDir()
	b.sock = filepath.Join(dir, "bus")
	b.conf = testtool.WriteFile(t, filepath.Join(dir, "bus.conf"), []byte(strings.ReplaceAll(openBus, "SOCKET", b.sock)))
	b.start()
	t.Cleanup(func() { b.kill() })
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", b.addr)
	return b
}

// start runs the daemon and waits (bounded) for its address; a killed
// daemon's socket is removed first, so it comes back at the same address.
func (b *testBus) start() {
	b.t.Helper()
	os.Remove(b.sock)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, b.bin, "--config-file="+b.conf, "--nofork", "--print-address=1", "--nosyslog")
	var log testtool.Buffer
	cmd.Stderr = &log
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.t.Fatal(err)
	}
	b.stopDaemon = func() { cancel(); cmd.Wait() }
	addr := make(chan string, 1)
	go func() {
		a, _ := bufio.NewReader(out).ReadString('\n')
		addr <- strings.TrimSpace(a)
	}()
	select {
	case a := <-addr:
		if a == "" {
			b.kill()
			b.t.Fatalf("dbus-daemon printed no address:\n%s", log.String())
		}
		b.addr = a
	case <-time.After(10 * time.Second):
		b.kill()
		b.t.Fatalf("dbus-daemon: no address in 10 s:\n%s", log.String())
	}
}

// kill stops the daemon (SIGKILL), as a crashed bus goes away.
func (b *testBus) kill() {
	if b.stopDaemon != nil {
		b.stopDaemon()
		b.stopDaemon = nil
	}
}

// client is a connection of the test's to the bus.
func (b *testBus) client() *dbus.Conn {
	b.t.Helper()
	c, err := dbus.Connect(b.addr)
	if err != nil {
		b.t.Fatalf("connect to %s: %v", b.addr, err)
	}
	b.t.Cleanup(func() { c.Close() })
	return c
}

// stubHandler is an agent that is idle on slot A and does nothing.
type stubHandler struct{}

func (stubHandler) InstallFrom(context.Context, string, []byte) (ota.Outcome, error) {
	return ota.Outcome{}, nil
}
func (stubHandler) Status() ota.Status                     { return ota.Status{State: ota.Idle, BootedSlot: ota.SlotA} }
func (stubHandler) MarkGood(context.Context) error         { return nil }
func (stubHandler) MarkBad(context.Context) error          { return nil }
func (stubHandler) Cancel(context.Context) error           { return nil }
func (stubHandler) MarkActive(context.Context, bool) error { return nil }
