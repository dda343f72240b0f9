package daemon_test

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/otad/otad/device/busapi"
	"github.com/otad/otad/internal/testkit/devicetest"
	"github.com/otad/otad/internal/testkit/testtool"
)

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
	waitState(t, addr, "staged")

	// Another payload while one is staged is refused at once, as busy.
	if out, err := gdbusCall(t, addr, "InstallStream", openFiles(t, writeTemp(t, env4), writeTemp(t, img)), "3", "4"); err == nil || !strings.Contains(out, busapi.ErrorPrefix+"Busy") {
		t.Errorf("InstallStream while staged: %v: %s; want %sBusy", err, out, busapi.ErrorPrefix)
	}

	// A chunked payload's index and store passed as files.
	if out, err := call(t, addr, "MarkActive", "s", "booted"); err != nil {
		t.Fatalf("MarkActive booted: %v: %s", err, out)
	}
	waitState(t, addr, "idle")
	env5, sha5 := tb.Offer("v5", 5, devicetest.OfferOpts{Chunked: true})
	idx, store := fetch(t, tb.Srv.URL+"/v5.idx"), fetch(t, tb.Srv.URL+"/v5.store")
	hits = tb.Hits("v5.idx") + tb.Hits("v5.store")
	if out, err := gdbusCall(t, addr, "InstallChunked", openFiles(t, writeTemp(t, env5), writeTemp(t, idx), writeTemp(t, store)), "3", "4", "5"); err != nil || strings.TrimSpace(out) != "(uint64 4,)" {
		t.Fatalf("InstallChunked: %v: %s", err, out)
	}
	sigs = mon.wait(t, "install 4's Completed", func(s []signal) bool { _, _, ok := completed(t, s, 4); return ok })
	if result, code, _ := completed(t, sigs, 4); result != "staged" || tb.Hits("v5.idx")+tb.Hits("v5.store") != hits {
		t.Errorf("install 4 completed %s (%s) after %d requests, want staged from the files alone", result, code, tb.Hits("v5.idx")+tb.Hits("v5.store")-hits)
	}
	var slotsNow map[string][3]string
	prop(t, addr, "Slots", &slotsNow)
	if slotsNow["B"][2] != sha5 || slotsNow["B"][1] != "staged" {
		t.Errorf("Slots after the chunked install: %v; want B staged with %s", slotsNow, sha5)
	}
}

func fetch(t *testing.T, url string) []byte {
	t.Helper()
	resp, err := http.Get(url)
	devicetest.Must(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	devicetest.Must(t, err)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	return b
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
