package device

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/otad/otad/agent"
	"github.com/otad/otad/device/statelock"
	"github.com/otad/otad/internal/testkit/devicetest"
	"github.com/otad/otad/internal/testkit/testtool"
	"github.com/otad/otad/ota"
)

var otadBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "otad-bin")
	if err != nil {
		panic(err)
	}
	otadBin = filepath.Join(dir, "otad")
	if out, err := exec.Command("go", "build", "-o", otadBin, "github.com/otad/otad/cmd/otad").CombinedOutput(); err != nil {
		panic(string(out))
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// otad runs the real binary and returns its exit code and output.
func otad(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, otadBin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String(), errb.String()
}

// writeConfig writes a device's otad.toml into dir: device gw-1 with its state
// directory and control socket in dir, the [slots] lines given, the kernel
// command line cmdline (written to dir/cmdline), and then sections (its
// [bootloader], [trust], …). It returns the config's path.
func writeConfig(t *testing.T, dir, cmdline, slots, sections string) string {
	t.Helper()
	cl := testtool.WriteFile(t, filepath.Join(dir, "cmdline"), []byte(cmdline))
	return testtool.WriteFile(t, filepath.Join(dir, "otad.toml"), []byte(`device_id = "gw-1"
compatible = "x"
state_dir = "`+dir+`/state"
control_socket = "`+dir+`/otad.sock"
[slots]
`+slots+`cmdline = "`+cl+`"
`+sections))
}

func writeEnv(t *testing.T, env []byte) string {
	f := filepath.Join(t.TempDir(), "offer.json")
	devicetest.Must(t, os.WriteFile(f, env, 0o600))
	return f
}

func TestInstallExitCodes(t *testing.T) {
	tb := devicetest.New(t, devicetest.Options{Policy: "manual"})
	cfg := tb.Cfg.Path
	good, sum := tb.Offer("v2", 2, devicetest.OfferOpts{Issued: time.Now().UTC()})
	tampered, _ := tb.Offer("evil", 3, devicetest.OfferOpts{Tamper: true, Issued: time.Now().UTC().Add(-30 * time.Second)})
	incompatible, _ := tb.Offer("x", 4, devicetest.OfferOpts{Compat: "acme,other"})

	if code, _, stderr := otad(t, "install", "-c", cfg); code != 2 || !strings.Contains(stderr, "usage") {
		t.Fatalf("no file: exit %d, %s", code, stderr)
	}
	// The refusal is said once: the final error, no WARN log line beside it.
	if code, _, stderr := otad(t, "install", "-c", cfg, writeEnv(t, incompatible)); code != 3 || strings.Count(stderr, "incompatible") != 1 {
		t.Fatalf("incompatible: exit %d, %s", code, stderr)
	}
	if code, _, stderr := otad(t, "install", "-v", "-c", cfg, writeEnv(t, incompatible)); code != 3 || !strings.Contains(stderr, "source=local") {
		t.Fatalf("incompatible, -v: exit %d, the log does not name the source local: %s", code, stderr)
	}
	if code, _, stderr := otad(t, "install", "-c", cfg, writeEnv(t, tampered)); code != 1 || !strings.Contains(stderr, "hash_mismatch") {
		t.Fatalf("tampered: exit %d, %s", code, stderr)
	}
	// Busy: another process holds the state lock; nothing is touched.
	lock, err := statelock.Acquire(tb.Cfg.StateDir)
	devicetest.Must(t, err)
	slotB, _ := os.ReadFile(tb.Cfg.Slots.B)
	journal, _ := os.ReadFile(filepath.Join(tb.Cfg.StateDir, agent.JournalName))
	code, _, stderr := otad(t, "install", "-c", cfg, writeEnv(t, good))
	lock.Release()
	if code != 4 || !strings.Contains(stderr, "busy") {
		t.Fatalf("busy: exit %d, %s", code, stderr)
	}
	if b, _ := os.ReadFile(tb.Cfg.Slots.B); !bytes.Equal(b, slotB) {
		t.Fatal("slot B changed while busy")
	}
	if j, _ := os.ReadFile(filepath.Join(tb.Cfg.StateDir, agent.JournalName)); !bytes.Equal(j, journal) {
		t.Fatal("journal changed while busy")
	}
	// Good image, in-process (no daemon): staged, exit 0.
	if code, stdout, stderr := otad(t, "install", "-c", cfg, writeEnv(t, good)); code != 0 || !strings.Contains(stdout, "staged rel-v2") {
		t.Fatalf("good: exit %d, %s %s", code, stdout, stderr)
	}
	code, stdout, _ := otad(t, "status", "--json", "-c", cfg)
	var st ota.Status
	if code != 0 || json.Unmarshal([]byte(stdout), &st) != nil {
		t.Fatalf("status --json: exit %d %q", code, stdout)
	}
	if st.State != ota.Staged || st.Target == nil || st.Target.SHA256 != sum || st.Slots["B"].SHA256 != sum { // manual policy: staged (issue 27)
		t.Fatalf("status after install: %+v", st)
	}
	// An accepted offer clears an older refusal (issue 27).
	if code, stdout, _ := otad(t, "status", "-c", cfg); code != 0 || !strings.Contains(stdout, "state:       staged: reboot to boot slot B") ||
		strings.Contains(stdout, "last refusal:") {
		t.Fatalf("status: %d %s", code, stdout)
	}
}

func TestInstallThroughDaemonAndReboot(t *testing.T) {
	tb := devicetest.New(t, devicetest.Options{Policy: "immediate"})
	cfg := tb.Cfg.Path
	good, sum := tb.Offer("v2", 2, devicetest.OfferOpts{})
	daemon := exec.Command(otadBin, "run", "-c", cfg)
	var dlog bytes.Buffer
	daemon.Stderr = &dlog
	devicetest.Must(t, daemon.Start())
	t.Cleanup(func() { daemon.Process.Kill(); daemon.Wait() })
	// Wait for the control socket.
	for i := 0; ; i++ {
		if code, out, _ := otad(t, "status", "--json", "-c", cfg); code == 0 && strings.Contains(out, `"booted_slot": "A"`) {
			break
		}
		if i > 200 {
			t.Fatalf("daemon did not come up: %s", dlog.String())
		}
		time.Sleep(25 * time.Millisecond)
	}
	// A second daemon is refused: busy.
	if code, _, stderr := otad(t, "run", "-c", cfg); code != 4 {
		t.Fatalf("second daemon: exit %d %s", code, stderr)
	}
	incompatible, _ := tb.Offer("x", 3, devicetest.OfferOpts{Compat: "acme,other"})
	if code, _, stderr := otad(t, "install", "-c", cfg, writeEnv(t, incompatible)); code != 3 || strings.Count(stderr, "incompatible") != 1 {
		t.Fatalf("incompatible through daemon: exit %d, %s", code, stderr)
	}
	if code, stdout, stderr := otad(t, "install", "-c", cfg, writeEnv(t, good)); code != 0 {
		t.Fatalf("install through daemon: exit %d %s %s\n%s", code, stdout, stderr, dlog.String())
	}
	// The sim device reboots: the daemon exits 0, as a real reboot ends it.
	done := make(chan error, 1)
	go func() { done <- daemon.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("daemon exit: %v\n%s", err, dlog.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("daemon did not exit after the reboot")
	}
	if !strings.Contains(dlog.String(), "source=control") {
		t.Errorf("the daemon's log does not name the control socket as the refused offer's source:\n%s", dlog.String())
	}
	// Started again (as systemd would), it confirms and commits.
	daemon2 := exec.Command(otadBin, "run", "-c", cfg)
	devicetest.Must(t, daemon2.Start())
	t.Cleanup(func() { daemon2.Process.Kill(); daemon2.Wait() })
	for i := 0; ; i++ {
		code, out, _ := otad(t, "status", "--json", "-c", cfg)
		var st ota.Status
		if code == 0 && json.Unmarshal([]byte(out), &st) == nil && st.LastResult != nil && st.LastResult.Result == ota.ResultSuccess {
			if st.BootedSlot != "B" || st.Slots["B"].SHA256 != sum {
				t.Fatalf("after commit: %+v", st)
			}
			break
		}
		if i > 400 {
			t.Fatalf("no commit: %s", out)
		}
		time.Sleep(25 * time.Millisecond)
	}
	// mark-bad on the committed new slot returns to the old one... but A was never
	// installed by otad, only booted: it is good, so this is allowed.
	if code, _, stderr := otad(t, "mark-bad", "-c", cfg); code != 0 {
		t.Fatalf("mark-bad: %d %s", code, stderr)
	}
	if b, _ := tb.Sim().Booted(); b != "A" {
		t.Fatalf("after mark-bad booted %s, want A", b)
	}
}

func TestBadConfigNamesFileAndKey(t *testing.T) {
	f := filepath.Join(t.TempDir(), "otad.toml")
	devicetest.Must(t, os.WriteFile(f, []byte("compatible = \"x\"\n[slots]\nA = \"/a\"\nB = \"/b\"\n[reboot]\npolicy = \"sometimes\"\n"), 0o600))
	code, _, stderr := otad(t, "run", "-c", f)
	if code != 2 || !strings.Contains(stderr, f) || !strings.Contains(stderr, "reboot.policy") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if code, _, _ := otad(t, "frobnicate"); code != 2 {
		t.Fatalf("unknown command: exit %d", code)
	}
}

// SIGTERM mid-install stops the daemon cleanly with the install journaled;
// started again, it writes the image again and completes.
func TestSigtermMidInstallResumes(t *testing.T) {
	tb := devicetest.New(t, devicetest.Options{Policy: "manual"})
	cfg := tb.Cfg.Path
	good, sum := tb.Offer("v2", 2, devicetest.OfferOpts{})
	tb.Throttle.Store(true)
	d := exec.Command(otadBin, "run", "-c", cfg)
	var dlog bytes.Buffer
	d.Stderr = &dlog
	devicetest.Must(t, d.Start())
	t.Cleanup(func() { d.Process.Kill() })
	for i := 0; ; i++ {
		if code, _, _ := otad(t, "status", "-c", cfg); code == 0 {
			if _, err := os.Stat(tb.Cfg.ControlSocket); err == nil {
				break
			}
		}
		if i > 200 {
			t.Fatalf("daemon did not come up: %s", dlog.String())
		}
		time.Sleep(25 * time.Millisecond)
	}
	envFile := writeEnv(t, good)
	inst := exec.Command(otadBin, "install", "-c", cfg, envFile)
	devicetest.Must(t, inst.Start())
	defer inst.Wait()
	for i := 0; tb.Fetched.Load() == 0; i++ {
		if i > 400 {
			t.Fatal("download did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	devicetest.Must(t, d.Process.Signal(syscall.SIGTERM))
	if err := d.Wait(); err != nil {
		t.Fatalf("daemon exit after SIGTERM: %v\n%s", err, dlog.String())
	}
	if j := tb.Journal(); j.Phase != ota.Downloading && j.Phase != ota.Verifying {
		t.Fatalf("journal after SIGTERM: %s", j.Phase)
	}
	tb.Throttle.Store(false)
	d2 := exec.Command(otadBin, "run", "-c", cfg)
	devicetest.Must(t, d2.Start())
	t.Cleanup(func() { d2.Process.Kill(); d2.Wait() })
	for i := 0; ; i++ {
		j := tb.Journal()
		if j.Phase == ota.Rebooting {
			if j.Slots["B"].SHA256 != sum || j.Restarts != 0 {
				t.Fatalf("after resume: %+v", j)
			}
			break
		}
		if i > 1000 {
			t.Fatalf("install did not resume: %s", j.Phase)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if devicetest.FileSHA(t, tb.Cfg.Slots.B, devicetest.ImageSize) != sum {
		t.Fatal("slot B does not hold the image")
	}
}

// otad mark-bad follows reboot.policy: under "manual" it marks the bootloader,
// does not reboot, and tells the operator to (issue 13).
func TestMarkBadManualPolicyDoesNotReboot(t *testing.T) {
	tb := devicetest.New(t, devicetest.Options{Policy: "manual"})
	cfg := tb.Cfg.Path
	good, _ := tb.Offer("v2", 2, devicetest.OfferOpts{})
	if code, stdout, stderr := otad(t, "install", "-c", cfg, writeEnv(t, good)); code != 0 ||
		!strings.Contains(stdout, ": staged rel-v2 (") || !strings.Contains(stdout, "reboot to boot it (reboot.policy is manual") {
		t.Fatalf("install: exit %d, %s %s", code, stdout, stderr)
	}
	// Issue 17: staged, waiting for the operator, not "rebooting" forever.
	if code, stdout, _ := otad(t, "status", "-c", cfg); code != 0 || !strings.Contains(stdout, "state:       staged: reboot to boot slot B\n") {
		t.Fatalf("status after a manual-policy install: %s", stdout)
	}
	// The operator reboots (manual policy): the sim boots B; mark-good commits it.
	if _, err := tb.Sim().Boot(); err != nil {
		t.Fatal(err)
	}
	if code, stdout, stderr := otad(t, "mark-good", "-c", cfg); code != 0 || stdout != "committed v2 in slot B\n" {
		t.Fatalf("mark-good: exit %d, %q %s", code, stdout, stderr)
	}
	code, stdout, stderr := otad(t, "mark-bad", "-c", cfg)
	if code != 0 {
		t.Fatalf("mark-bad: exit %d, %s %s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "reboot.policy is manual") || !strings.Contains(stdout, "to return to slot A") {
		t.Errorf("mark-bad does not say what the operator must do:\n%s", stdout)
	}
	// No reboot happened: still on B, but the bootloader will boot A next.
	if b, _ := tb.Sim().Booted(); b != "B" {
		t.Fatalf("after mark-bad under the manual policy the sim booted %s, want still B", b)
	}
	v, err := tb.Sim().Vars()
	devicetest.Must(t, err)
	if v["BOOT_ORDER"] != "A" || v["BOOT_B_LEFT"] != "0" {
		t.Fatalf("boot variables after mark-bad: %v", v)
	}
	// Started again in the same boot (the agent runs in-process for the
	// command), otad still leaves the reboot to the operator.
	if code, stdout, stderr := otad(t, "mark-bad", "-c", cfg); code != 0 || !strings.Contains(stdout, "reboot.policy is manual") {
		t.Fatalf("mark-bad again: exit %d, %s %s", code, stdout, stderr)
	}
	if b, _ := tb.Sim().Booted(); b != "B" {
		t.Fatalf("otad rebooted on its own: booted %s", b)
	}
}

// mark-bad says what it did: the staged install's slot marked bad (the
// booted slot stays), or the booted slot rejected and what brings the other back.
func TestMarkedBad(t *testing.T) {
	slots := func(a, b ota.SlotState) map[ota.Slot]ota.SlotStatus {
		return map[ota.Slot]ota.SlotStatus{"A": {Status: a}, "B": {Status: b}}
	}
	tests := []struct {
		name   string
		after  ota.Status
		manual bool
		want   []string
		not    []string
	}{
		{name: "a staged install dropped under the manual policy",
			after:  ota.Status{BootedSlot: "A", Slots: slots(ota.SlotGood, ota.SlotBad), LastResult: &ota.Outcome{ID: "rel-2"}},
			manual: true, want: []string{"rel-2 is dropped and slot B marked bad", "slot A stays active", "no reboot needed"}, not: []string{"booted slot", "Reboot"}},
		{name: "the booted slot rejected under the manual policy",
			after:  ota.Status{BootedSlot: "B", Slots: slots(ota.SlotGood, ota.SlotBad)},
			manual: true, want: []string{"booted slot marked bad; slot A is active", "to return to slot A"}},
		{name: "the booted slot rejected under the immediate policy",
			after: ota.Status{BootedSlot: "B", Slots: slots(ota.SlotGood, ota.SlotBad)}, want: []string{"booted slot marked bad; rebooting"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := markedBad(tc.after, tc.manual)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("%q does not say %q", got, w)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(got, n) {
					t.Errorf("%q says %q", got, n)
				}
			}
		})
	}
}

// Issue 27: the text status shows what a download waits for, as the JSON's
// target.waiting does (docs/contract/installing.md).
func TestStatusShowsWaiting(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	w := &ota.Waiting{For: ota.WaitNetwork, Error: "dial tcp: connection refused", Since: now.Add(-130 * time.Second), NextTry: now.Add(40 * time.Second)}
	for _, tc := range []struct {
		name    string
		waiting *ota.Waiting
		want    string
	}{
		{"waiting for the network", w, "waiting:     waiting for the network (2:10): dial tcp: connection refused; next try in 40s\n"},
		{"downloading", nil, ""},
		{"confirming", nil, "confirming:  since 2026-01-02T02:04:05Z, 4m10s of the commit window's running time left\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			st := ota.Status{Device: "pc-1", State: ota.Downloading, BootedSlot: "A",
				Target: &ota.TargetStatus{ID: "rel-2", Version: "2", BytesDone: 1, BytesTotal: 4, Waiting: tc.waiting}}
			if tc.name == "confirming" {
				left := int64(250_000)
				st.State, st.Target.ConfirmingSince, st.Target.WindowLeftMS = ota.Confirming, now.Add(-time.Hour), &left
			}
			printStatus(&b, st, true, now)
			if got := b.String(); tc.want != "" && !strings.Contains(got, tc.want) || tc.want == "" && strings.Contains(got, "waiting") {
				t.Errorf("status:\n%s\nwant the line %q", got, tc.want)
			}
		})
	}
}
