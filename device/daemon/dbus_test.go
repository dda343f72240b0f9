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
	"syscall"
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

// otad run on a system bus, driven by busctl and gdbus as a device UI
// would: the state read, an install whose progress is signalled to its
// end, a staged install dropped with MarkActive, a running one cancelled,
// a payload passed as a file, and the errors' names.
func TestDBusInterface(t *testing.T) {
	addr := systemBus(t)
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", addr)
	tb := devicetest.New(t, devicetest.Options{Policy: "manual"})
	runDevice(t, tb)
	// Once otad owns the name, it checks a method's arguments.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		out, _ := gdbusCall(t, addr, "MarkActive", nil, "sideways")
		if strings.Contains(out, "org.freedesktop.DBus.Error.InvalidArgs") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("MarkActive sideways: %s", out)
		}
	}
	var state, booted string
	prop(t, addr, "State", &state)
	prop(t, addr, "BootedSlot", &booted)
	var slots map[string][3]string
	prop(t, addr, "Slots", &slots)
	if state != "idle" || booted != "A" || slots["A"][1] != "good" || len(slots) != 2 {
		t.Fatalf("State %q, BootedSlot %q, Slots %v; want idle on a good A", state, booted, slots)
	}
	mon := watchSignals(t, addr)
	// The policy: a member of the group reads and calls, anyone else is
	// denied by the bus (as another user: root only).
	if os.Getuid() == 0 {
		for _, c := range []struct {
			groups []uint32
			want   string
		}{{[]uint32{65534}, `s "idle"`}, {nil, "Access denied"}} {
			cmd := exec.Command(testtool.Require(t, "busctl", "systemd"), "--address="+addr, "get-property", busapi.Name, string(busapi.Path), busapi.Iface, "State")
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 1, Groups: c.groups}}
			if out, _ := cmd.CombinedOutput(); !strings.Contains(string(out), c.want) {
				t.Errorf("State read by nobody in groups %v: %s; want %q", c.groups, out, c.want)
			}
		}
	}

	// An operator's command the agent refuses names why, under Error.Failed.
	if out, err := gdbusCall(t, addr, "Cancel", nil); err == nil || !strings.Contains(out, busapi.ErrorPrefix+"Failed") || !strings.Contains(out, "no install is running") {
		t.Errorf("Cancel when idle: %v: %s", err, out)
	}

	// An install: the envelope passed as a file; progress to the end.
	tb.Throttle.Store(true) // a download of about a second: several reports
	env, sha := tb.Offer("v2", 2, devicetest.OfferOpts{})
	if out, err := gdbusCall(t, addr, "Install", openFiles(t, writeTemp(t, env)), "3"); err != nil || strings.TrimSpace(out) != "(uint64 1,)" {
		t.Fatalf("Install: %v: %s", err, out)
	}
	sigs := mon.wait(t, "install 1's Completed", func(s []signal) bool { _, _, ok := completed(t, s, 1); return ok })
	if result, code, _ := completed(t, sigs, 1); result != "staged" || code != "" {
		t.Errorf("install 1 completed %s (%s), want staged (manual reboot policy)", result, code)
	}
	var last uint64
	reports := 0
	for _, s := range sigs {
		if s.Member != "Progress" {
			continue
		}
		var id, psha, phase string
		var done, total uint64
		var rate float64
		s.args(t, &id, &psha, &phase, &done, &total, &rate)
		if id != "rel-v2" || psha != sha || total != devicetest.ImageSize || done < last || done > total || (phase != "downloading" && phase != "verifying") {
			t.Errorf("Progress(%s, %s, %s, %d, %d, %g): not install 1's, or going back", id, psha, phase, done, total, rate)
		}
		last, reports = done, reports+1
	}
	if reports < 2 {
		t.Errorf("%d Progress signals during a throttled download, want several", reports)
	}
	if !sawChange(t, sigs, "State", `"downloading"`) {
		t.Errorf("no PropertiesChanged for State downloading:\n%s", mon.out.String())
	}
	waitState(t, addr, "staged")
	var target [5]any
	prop(t, addr, "Target", &target)
	if target[0] != "rel-v2" || target[2] != sha {
		t.Errorf("Target %v, want rel-v2's", target)
	}

	// MarkActive booted drops the staged install.
	if out, err := call(t, addr, "MarkActive", "s", "booted"); err != nil {
		t.Fatalf("MarkActive booted: %v: %s", err, out)
	}
	waitState(t, addr, "idle")

	// Cancel stops an install mid-download; its Completed says so.
	env3, _ := tb.Offer("v3", 3, devicetest.OfferOpts{})
	if out, err := gdbusCall(t, addr, "Install", openFiles(t, writeTemp(t, env3)), "3"); err != nil || strings.TrimSpace(out) != "(uint64 2,)" {
		t.Fatalf("Install: %v: %s", err, out)
	}
	waitState(t, addr, "downloading")
	if out, err := call(t, addr, "Cancel"); err != nil {
		t.Fatalf("Cancel: %v: %s", err, out)
	}
	sigs = mon.wait(t, "install 2's Completed", func(s []signal) bool { _, _, ok := completed(t, s, 2); return ok })
	if result, code, _ := completed(t, sigs, 2); result != "failed" || code != "cancelled" {
		t.Errorf("install 2 completed %s (%s), want failed (cancelled)", result, code)
	}
	var lastResult [5]string
	prop(t, addr, "LastResult", &lastResult)
	if lastResult[0] != "failed" || lastResult[1] != "cancelled" || lastResult[3] != "rel-v3" {
		t.Errorf("LastResult %v, want rel-v3 failed (cancelled)", lastResult)
	}

	// A stream payload passed as a file: nothing is downloaded.
	img := devicetest.RandBytes(4, devicetest.ImageSize)
	env4, _ := tb.Offer("v4", 4, devicetest.OfferOpts{URL: "https://unreachable.invalid/v4"})
	hits := tb.Hits("v4")
	if out, err := gdbusCall(t, addr, "InstallStream", openFiles(t, writeTemp(t, env4), writeTemp(t, img)), "3", "4"); err != nil || strings.TrimSpace(out) != "(uint64 3,)" {
		t.Fatalf("InstallStream: %v: %s", err, out)
	}
	sigs = mon.wait(t, "install 3's Completed", func(s []signal) bool { _, _, ok := completed(t, s, 3); return ok })
	if result, code, _ := completed(t, sigs, 3); result != "staged" || tb.Hits("v4") != hits {
		t.Errorf("install 3 completed %s (%s) after %d requests, want staged from the file alone", result, code, tb.Hits("v4")-hits)
	}
}

// sawChange reports whether a PropertiesChanged signal set name to value
// (JSON).
func sawChange(t *testing.T, sigs []signal, name, value string) bool {
	for _, s := range sigs {
		if s.Member != "PropertiesChanged" {
			continue
		}
		var iface string
		var changed map[string]struct {
			Data json.RawMessage `json:"data"`
		}
		var invalidated []string
		s.args(t, &iface, &changed, &invalidated)
		if v, ok := changed[name]; ok && iface == busapi.Iface && string(v.Data) == value {
			return true
		}
	}
	return false
}

func writeTemp(t *testing.T, b []byte) string {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "passed")
	devicetest.Must(t, err)
	_, err = f.Write(b)
	devicetest.Must(t, err)
	devicetest.Must(t, f.Close())
	return f.Name()
}

func openFiles(t *testing.T, paths ...string) []*os.File {
	t.Helper()
	var fs []*os.File
	for _, p := range paths {
		f, err := os.Open(p)
		devicetest.Must(t, err)
		t.Cleanup(func() { f.Close() })
		fs = append(fs, f)
	}
	return fs
}
