package daemon_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/device/busapi"
	"github.com/otad/otad/internal/testkit/devicetest"
	"github.com/otad/otad/internal/testkit/testtool"
)

// busConfig is a system bus as Debian's system.conf sets it up (method
// calls denied unless a service's policy lets them through), listening on
// a socket of the test's, with otad's shipped policy included.
const busConfig = `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=SOCKET</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <deny own="*"/>
    <deny send_type="method_call"/>
    <allow send_type="signal"/>
    <allow send_requested_reply="true" send_type="method_return"/>
    <allow send_requested_reply="true" send_type="error"/>
    <allow receive_type="method_call"/>
    <allow receive_type="method_return"/>
    <allow receive_type="error"/>
    <allow receive_type="signal"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Introspectable"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Properties"/>
  </policy>
  <policy user="root">
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Monitoring"/>
  </policy>
  <include>POLICY</include>
  <include>GROUP</include>
</busconfig>
`

// systemBus starts a dbus-daemon with busConfig and returns its address.
// The shipped policy is included as it is when the test runs as root;
// otherwise with the test's user in root's place, who then owns the name
// and calls the methods as otad and root would. A copy names nogroup in
// otad's place: the group this machine has.
func systemBus(t *testing.T) string {
	t.Helper()
	bin := testtool.Require(t, "dbus-daemon", "dbus-daemon")
	// A directory others can enter, for the calls made as another user.
	dir, err := os.MkdirTemp("", "otad-dbus")
	devicetest.Must(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	devicetest.Must(t, os.Chmod(dir, 0o755))
	policy, err := os.ReadFile("../../packaging/dbus/" + busapi.Name + ".conf")
	devicetest.Must(t, err)
	if os.Getuid() != 0 {
		u, err := user.Current()
		devicetest.Must(t, err)
		policy = []byte(strings.ReplaceAll(string(policy), `user="root"`, `user="`+u.Username+`"`))
	}
	policyPath := testtool.WriteFile(t, filepath.Join(dir, "policy.conf"), policy)
	// The group's rule, for a group this machine has: members of nogroup
	// call as members of otad would.
	groupPath := testtool.WriteFile(t, filepath.Join(dir, "group.conf"), []byte(strings.ReplaceAll(string(policy), `group="otad"`, `group="nogroup"`)))
	sock := filepath.Join(dir, "bus")
	conf := strings.NewReplacer("SOCKET", sock, "POLICY", policyPath, "GROUP", groupPath).Replace(busConfig)
	confPath := testtool.WriteFile(t, filepath.Join(dir, "bus.conf"), []byte(conf))
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "--config-file="+confPath, "--nofork", "--print-address=1", "--nosyslog")
	var log testtool.Buffer
	cmd.Stderr = &log
	out, err := cmd.StdoutPipe()
	devicetest.Must(t, err)
	devicetest.Must(t, cmd.Start())
	testtool.StopAtEnd(t, "dbus-daemon", func() { cancel(); cmd.Wait() }, log.String)
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("dbus-daemon: %v\n%s", err, log.String())
	}
	return strings.TrimSpace(addr)
}

// busctl runs busctl --json=short against the bus.
func busctl(t *testing.T, addr string, args ...string) (string, error) {
	t.Helper()
	bin := testtool.Require(t, "busctl", "systemd")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, append([]string{"--address=" + addr, "--json=short"}, args...)...).CombinedOutput()
	return string(out), err
}

// prop reads one of otad's properties with busctl, decoded into v.
func prop(t *testing.T, addr, name string, v any) {
	t.Helper()
	out, err := busctl(t, addr, "get-property", busapi.Name, string(busapi.Path), busapi.Iface, name)
	if err != nil {
		t.Fatalf("busctl get-property %s: %v\n%s", name, err, out)
	}
	var bv struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal([]byte(out), &bv); err != nil {
		t.Fatalf("busctl get-property %s: %v\n%s", name, err, out)
	}
	devicetest.Must(t, json.Unmarshal(bv.Data, v))
}

// call calls one of otad's methods with busctl.
func call(t *testing.T, addr, method string, args ...string) (string, error) {
	t.Helper()
	return busctl(t, addr, append([]string{"call", busapi.Name, string(busapi.Path), busapi.Iface, method}, args...)...)
}

// gdbusCall calls a method with gdbus, which passes file descriptors
// (busctl cannot): files are the caller's descriptors 3, 4, ... and the
// arguments name them so.
func gdbusCall(t *testing.T, addr, method string, files []*os.File, args ...string) (string, error) {
	t.Helper()
	bin := testtool.Require(t, "gdbus", "libglib2.0-bin")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"call", "--address", addr, "--dest", busapi.Name,
		"--object-path", string(busapi.Path), "--method", busapi.Iface + "." + method}, args...)...)
	cmd.ExtraFiles = files
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// signal is one signal of otad's as busctl monitor shows it.
type signal struct {
	Member  string `json:"member"`
	Payload struct {
		Data []json.RawMessage `json:"data"`
	} `json:"payload"`
}

// monitor records otad's signals with busctl monitor.
type monitor struct{ out testtool.Buffer }

func watchSignals(t *testing.T, addr string) *monitor {
	t.Helper()
	bin := testtool.Require(t, "busctl", "systemd")
	m := &monitor{}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "--address="+addr, "monitor", "--json=short", busapi.Name)
	cmd.Stdout, cmd.Stderr = &m.out, &m.out
	devicetest.Must(t, cmd.Start())
	t.Cleanup(func() { cancel(); cmd.Wait() })
	// busctl says so once it is a monitor: no signal after is missed.
	m.wait(t, "busctl monitor", func([]signal) bool { return strings.Contains(m.out.String(), "Monitoring") })
	return m
}

func (m *monitor) signals() []signal {
	var sigs []signal
	for _, l := range strings.Split(m.out.String(), "\n") {
		var s signal
		if json.Unmarshal([]byte(l), &s) == nil && strings.Contains(l, `"type":"signal"`) {
			sigs = append(sigs, s)
		}
	}
	return sigs
}

func (m *monitor) wait(t *testing.T, what string, ok func([]signal) bool) []signal {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if s := m.signals(); ok(s) {
			return s
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s; busctl monitor:\n%s", what, m.out.String())
	return nil
}

// args decodes a signal's arguments into vs.
func (s signal) args(t *testing.T, vs ...any) {
	t.Helper()
	if len(s.Payload.Data) != len(vs) {
		t.Fatalf("%s has %d arguments, want %d", s.Member, len(s.Payload.Data), len(vs))
	}
	for i, v := range vs {
		devicetest.Must(t, json.Unmarshal(s.Payload.Data[i], v))
	}
}

// completed finds the Completed signal of install n.
func completed(t *testing.T, sigs []signal, n uint64) (result, code string, ok bool) {
	for _, s := range sigs {
		if s.Member != "Completed" {
			continue
		}
		var got uint64
		var msg, id, sha string
		s.args(t, &got, &result, &code, &msg, &id, &sha)
		if got == n {
			return result, code, true
		}
	}
	return "", "", false
}

func waitState(t *testing.T, addr, want string) {
	t.Helper()
	var st string
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if prop(t, addr, "State", &st); st == want {
			return
		}
	}
	t.Fatalf("State is %q, want %q", st, want)
}
