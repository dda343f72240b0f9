package device

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/internal/testkit/devicetest"
	"github.com/otad/otad/ota"
)

// Issue 27: a truncated file from a USB stick ends the offer retryable, the
// error names the file the person gave (not the descriptor the daemon
// holds), and the same command with the right file installs it.
func TestCorrectedPayloadInstallsAgain(t *testing.T) {
	tb := devicetest.New(t, devicetest.Options{Policy: "manual"})
	img := devicetest.RandBytes(9, devicetest.ImageSize)
	env, sum := tb.Offer("usb", 9, devicetest.OfferOpts{Image: img, URL: unreachable})
	dir := t.TempDir()
	short, good := filepath.Join(dir, "short.img"), filepath.Join(dir, "rootfs.img")
	devicetest.Must(t, os.WriteFile(short, img[:len(img)/2], 0o600))
	devicetest.Must(t, os.WriteFile(good, img, 0o600))
	startDaemon(t, tb.Cfg.Path)
	envFile := writeEnv(t, env)
	code, stdout, stderr := otad(t, "install", "-c", tb.Cfg.Path, "--payload", short, envFile)
	if code != 1 || !strings.Contains(stderr, "size_mismatch") || !strings.Contains(stderr, short) || strings.Contains(stderr, "/proc/self/fd") {
		t.Fatalf("truncated file: exit %d, want 1 with size_mismatch naming %s\n%s%s", code, short, stdout, stderr)
	}
	if !strings.Contains(stderr, "retryable") {
		t.Errorf("the failure does not say it can be tried again:\n%s", stderr)
	}
	// otad info agrees with otad install: a retryable ending starts again.
	if code, stdout, stderr := otad(t, "info", "-c", tb.Cfg.Path, envFile); code != 0 || !strings.Contains(stdout, "would install into slot B") {
		t.Errorf("info of a retryable ending: exit %d, want 0 and would install\n%s%s", code, stdout, stderr)
	}
	code, stdout, stderr = otad(t, "install", "-c", tb.Cfg.Path, "--payload", good, envFile)
	if code != 0 || !strings.Contains(stdout, "staged rel-usb") {
		t.Fatalf("the right file: exit %d\n%s%s", code, stdout, stderr)
	}
	if devicetest.FileSHA(t, tb.Cfg.Slots.B, int64(len(img))) != sum {
		t.Fatal("slot B does not hold the image")
	}
}

// Issue 27: --payload behind a staged install is refused (exit 4), naming
// what is staged and what settles it; mark-active booted drops the staged
// install, and then the offer installs from the file.
func TestPayloadBehindStagedThenMarkActiveBooted(t *testing.T) {
	for _, daemon := range []bool{false, true} {
		t.Run(map[bool]string{false: "in-process", true: "through the daemon"}[daemon], func(t *testing.T) {
			tb := devicetest.New(t, devicetest.Options{Policy: "manual"})
			first, _ := tb.Offer("v2", 2, devicetest.OfferOpts{})
			img := devicetest.RandBytes(3, devicetest.ImageSize)
			next, sum := tb.Offer("usb", 3, devicetest.OfferOpts{Image: img, URL: unreachable, Issued: time.Now().Add(time.Second)})
			local := filepath.Join(t.TempDir(), "rootfs.img")
			devicetest.Must(t, os.WriteFile(local, img, 0o600))
			if daemon {
				startDaemon(t, tb.Cfg.Path)
			}
			if code, stdout, stderr := otad(t, "install", "-c", tb.Cfg.Path, writeEnv(t, first)); code != 0 || !strings.Contains(stdout, "staged rel-v2") {
				t.Fatalf("first install: exit %d\n%s%s", code, stdout, stderr)
			}
			nextFile := writeEnv(t, next)
			code, stdout, stderr := otad(t, "install", "-c", tb.Cfg.Path, "--payload", local, nextFile)
			if code != ota.ExitBusy || !strings.Contains(stderr, "rel-v2") || !strings.Contains(stderr, "staged") || !strings.Contains(stderr, "otad mark-active booted") {
				t.Fatalf("--payload behind a staged install: exit %d, want 4 naming rel-v2 staged and mark-active booted\n%s%s", code, stdout, stderr)
			}
			if code, stdout, stderr := otad(t, "mark-active", "-c", tb.Cfg.Path, "booted"); code != 0 || !strings.Contains(stdout, "slot A is primary again") {
				t.Fatalf("mark-active booted: exit %d\n%s%s", code, stdout, stderr)
			}
			if v, err := tb.Sim().Vars(); err != nil || !strings.HasPrefix(v["BOOT_ORDER"], "A") {
				t.Fatalf("boot order after mark-active booted: %v %v", v, err)
			}
			if code, stdout, _ := otad(t, "status", "-c", tb.Cfg.Path); code != 0 || !strings.Contains(stdout, "state:       idle") {
				t.Fatalf("status after mark-active booted:\n%s", stdout)
			}
			if code, stdout, stderr := otad(t, "install", "-c", tb.Cfg.Path, "--payload", local, nextFile); code != 0 || !strings.Contains(stdout, "staged rel-usb") {
				t.Fatalf("the next offer: exit %d\n%s%s", code, stdout, stderr)
			}
			if devicetest.FileSHA(t, tb.Cfg.Slots.B, int64(len(img))) != sum {
				t.Fatal("slot B does not hold the next image")
			}
			if code, _, stderr := otad(t, "mark-active", "-c", tb.Cfg.Path, "other"); code == 0 || !strings.Contains(stderr, "install is staged") && !strings.Contains(stderr, "refused") {
				t.Fatalf("mark-active other while staged: exit %d %s", code, stderr)
			}
		})
	}
}

// Issue 27: otad cancel stops a download the daemon runs: the slot stays
// unbootable, the boot environment untouched, the journal says cancelled
// (retryable), and the same envelope then installs.
func TestCancelMidDownloadThenInstall(t *testing.T) {
	tb := devicetest.New(t, devicetest.Options{Policy: "manual"})
	env, sum := tb.Offer("v2", 2, devicetest.OfferOpts{})
	startDaemon(t, tb.Cfg.Path)
	tb.Throttle.Store(true)
	envFile := writeEnv(t, env)
	inst := exec.Command(otadBin, "install", "-c", tb.Cfg.Path, envFile)
	var out strings.Builder
	inst.Stderr = &out
	devicetest.Must(t, inst.Start())
	for i := 0; tb.Fetched.Load() == 0; i++ {
		if i > 1000 {
			t.Fatal("download did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Slot B was marked bad before its first byte; cancel changes nothing more.
	before, err := tb.Sim().Vars()
	devicetest.Must(t, err)
	if code, stdout, stderr := otad(t, "cancel", "-c", tb.Cfg.Path); code != 0 || !strings.Contains(stdout, "cancelled rel-v2") {
		t.Fatalf("cancel: exit %d\n%s%s", code, stdout, stderr)
	}
	if err := inst.Wait(); err == nil || !strings.Contains(out.String(), "cancelled") {
		t.Fatalf("the waiting install: %v\n%s", err, out.String())
	}
	j := tb.Journal()
	if j.Phase != ota.Idle || j.LastResult == nil || j.LastResult.Code != ota.CodeCancelled || !j.LastResult.Retryable {
		t.Fatalf("journal after cancel: %s %+v", j.Phase, j.LastResult)
	}
	after, err := tb.Sim().Vars()
	devicetest.Must(t, err)
	if after["BOOT_ORDER"] != before["BOOT_ORDER"] || after["BOOT_B_LEFT"] != before["BOOT_B_LEFT"] || !strings.HasPrefix(after["BOOT_ORDER"], "A") {
		t.Fatalf("boot order changed by a cancelled install: %v, was %v", after, before)
	}
	if code, _, _ := otad(t, "cancel", "-c", tb.Cfg.Path); code != 1 {
		t.Errorf("cancel with nothing running: exit %d, want 1", code)
	}
	tb.Throttle.Store(false)
	if code, stdout, stderr := otad(t, "install", "-c", tb.Cfg.Path, envFile); code != 0 || !strings.Contains(stdout, "staged rel-v2") {
		t.Fatalf("the same envelope after cancel: exit %d\n%s%s", code, stdout, stderr)
	}
	if devicetest.FileSHA(t, tb.Cfg.Slots.B, devicetest.ImageSize) != sum {
		t.Fatal("slot B does not hold the image")
	}
}

// Issue 27: under the manual policy an install past its flip is staged in
// otad status --json too, and otad mark-bad drops it.
func TestMarkBadDropsStagedUnderManualPolicy(t *testing.T) {
	tb := devicetest.New(t, devicetest.Options{Policy: "manual"})
	env, _ := tb.Offer("v2", 2, devicetest.OfferOpts{})
	if code, stdout, stderr := otad(t, "install", "-c", tb.Cfg.Path, writeEnv(t, env)); code != 0 {
		t.Fatalf("install: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, stdout, _ := otad(t, "status", "--json", "-c", tb.Cfg.Path); code != 0 || !strings.Contains(stdout, `"state": "staged"`) {
		t.Fatalf("status --json of a staged install:\n%s", stdout)
	}
	// It says what it did: slot B dropped and marked bad, A stays active,
	// nothing to reboot for (not the booted slot's rejection).
	if code, stdout, stderr := otad(t, "mark-bad", "-c", tb.Cfg.Path); code != 0 ||
		!strings.Contains(stdout, "rel-v2 is dropped and slot B marked bad; slot A stays active") || strings.Contains(stdout, "Reboot") {
		t.Fatalf("mark-bad while staged: exit %d\n%s%s", code, stdout, stderr)
	}
	j := tb.Journal()
	if j.Phase != ota.Idle || j.Slots["B"].Status != ota.SlotBad {
		t.Fatalf("after mark-bad: %s slot B %+v", j.Phase, j.Slots["B"])
	}
	if v, _ := tb.Sim().Vars(); !strings.HasPrefix(v["BOOT_ORDER"], "A") {
		t.Fatalf("boot order after mark-bad: %v", v)
	}
}

// Issue 27: Ctrl-C on otad install stops the command, not the daemon's
// install, and says so and how to stop it.
func TestInterruptedInstallSaysTheDaemonGoesOn(t *testing.T) {
	tb := devicetest.New(t, devicetest.Options{Policy: "manual"})
	env, _ := tb.Offer("v2", 2, devicetest.OfferOpts{})
	startDaemon(t, tb.Cfg.Path)
	tb.Throttle.Store(true)
	inst := exec.Command(otadBin, "install", "-c", tb.Cfg.Path, writeEnv(t, env))
	var out strings.Builder
	inst.Stderr = &out
	devicetest.Must(t, inst.Start())
	for i := 0; tb.Fetched.Load() == 0; i++ {
		if i > 1000 {
			t.Fatal("download did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	devicetest.Must(t, inst.Process.Signal(os.Interrupt))
	if err := inst.Wait(); err == nil || !strings.Contains(out.String(), "the daemon goes on") || !strings.Contains(out.String(), "otad cancel") {
		t.Fatalf("Ctrl-C: %v\n%s", err, out.String())
	}
	if st, ok := status(t, tb.Cfg.Path); !ok || st.State != ota.Downloading {
		t.Fatalf("after Ctrl-C the daemon's install: %+v", st)
	}
	tb.Throttle.Store(false)
}

// Issue 27: mark-active booted with a newer offer pending takes it up at
// once: what it prints promises nothing of slot B, which the pending offer
// overwrites, and without a daemon this process runs that install to its
// flip, never leaving the journal downloading with nothing running.
func TestMarkActiveBootedTakesUpPending(t *testing.T) {
	for _, daemon := range []bool{false, true} {
		t.Run(map[bool]string{false: "in-process", true: "through the daemon"}[daemon], func(t *testing.T) {
			tb := devicetest.New(t, devicetest.Options{Policy: "manual"})
			first, _ := tb.Offer("v2", 2, devicetest.OfferOpts{})
			next, sum := tb.Offer("v3", 3, devicetest.OfferOpts{Issued: time.Now().Add(time.Second)})
			if daemon {
				startDaemon(t, tb.Cfg.Path)
			}
			if code, stdout, stderr := otad(t, "install", "-c", tb.Cfg.Path, writeEnv(t, first)); code != 0 {
				t.Fatalf("first install: exit %d\n%s%s", code, stdout, stderr)
			}
			if code, stdout, stderr := otad(t, "install", "-c", tb.Cfg.Path, writeEnv(t, next)); code != 0 || !strings.Contains(stdout, "pending") {
				t.Fatalf("the newer offer: exit %d, want pending\n%s%s", code, stdout, stderr)
			}
			code, stdout, stderr := otad(t, "mark-active", "-c", tb.Cfg.Path, "booted")
			if code != 0 || !strings.Contains(stdout, "the pending rel-v3 is taken up") || strings.Contains(stdout, "keeps the verified image") {
				t.Fatalf("mark-active booted: exit %d\n%s%s", code, stdout, stderr)
			}
			if j := tb.Journal(); j.LastResult == nil || strings.Contains(j.LastResult.Message, "keeps the verified image") {
				t.Errorf("the dropped install's result: %+v", j.LastResult)
			}
			if daemon {
				return
			}
			if !strings.Contains(stdout, "staged in slot B") {
				t.Errorf("mark-active booted without a daemon does not say the install it ran is staged:\n%s", stdout)
			}
			if j := tb.Journal(); j.Phase == ota.Downloading || j.Phase == ota.Verifying || j.Target == nil || j.Target.ID != "rel-v3" {
				t.Fatalf("journal after mark-active booted without a daemon: %s %+v", j.Phase, j.Target)
			}
			if devicetest.FileSHA(t, tb.Cfg.Slots.B, devicetest.ImageSize) != sum {
				t.Fatal("slot B does not hold the pending image")
			}
		})
	}
}

// otad install of an offer whose ending is final (a hash_mismatch of the
// signed download) tries nothing: it says the offer already ended, with
// the earlier ending's code, message and time marked as such, that it was not
// tried again and what does try the image again; exit 1 as for the
// failure (docs/contract/commands.md).
func TestInstallOfFinalEndingSaysNotTriedAgain(t *testing.T) {
	for _, daemon := range []bool{false, true} {
		t.Run(map[bool]string{false: "in-process", true: "through the daemon"}[daemon], func(t *testing.T) {
			tb := devicetest.New(t, devicetest.Options{Policy: "manual"})
			tampered, _ := tb.Offer("evil", 3, devicetest.OfferOpts{Tamper: true})
			if daemon {
				startDaemon(t, tb.Cfg.Path)
			}
			envFile := writeEnv(t, tampered)
			before := time.Now().UTC().Truncate(time.Second)
			if code, stdout, stderr := otad(t, "install", "-c", tb.Cfg.Path, envFile); code != 1 || !strings.Contains(stderr, "failed: hash_mismatch") || strings.Contains(stderr, "not tried again") {
				t.Fatalf("first install: exit %d, want 1 with hash_mismatch\n%s%s", code, stdout, stderr)
			}
			after := time.Now().UTC()
			fetched := tb.Fetched.Load()
			code, stdout, stderr := otad(t, "install", "-c", tb.Cfg.Path, envFile)
			if code != 1 {
				t.Errorf("install of a final ending: exit %d, want 1\n%s%s", code, stdout, stderr)
			}
			for _, want := range []string{"not tried again", "rel-evil already ended failed", "hash_mismatch", "a final ending never starts again", "otactl sign"} {
				if !strings.Contains(stderr, want) {
					t.Errorf("install of a final ending does not say %q:\n%s%s", want, stdout, stderr)
				}
			}
			// When it ended: the first install's time, not this one's.
			if m := regexp.MustCompile(`already ended failed at (\S+) \(`).FindStringSubmatch(stderr); m == nil {
				t.Errorf("install of a final ending does not say when it ended:\n%s", stderr)
			} else if at, err := time.Parse(time.RFC3339, m[1]); err != nil || at.Before(before) || at.After(after) {
				t.Errorf("ended at %s (%v), want between %s and %s", m[1], err, before.Format(time.RFC3339), after.Format(time.RFC3339))
			}
			if strings.Contains(stderr, ": failed: hash_mismatch") {
				t.Errorf("install of a final ending reads as a new failure:\n%s", stderr)
			}
			if n := tb.Fetched.Load(); n != fetched {
				t.Errorf("install of a final ending fetched %d bytes", n-fetched)
			}
		})
	}
}

// mark-active booted without a daemon runs the pending offer it takes up:
// when that install fails, the command says the drop was done and the
// install failed, and exits as otad install does for that failure (1).
func TestMarkActiveBootedPendingFailsExitsNonZero(t *testing.T) {
	tb := devicetest.New(t, devicetest.Options{Policy: "manual"})
	first, _ := tb.Offer("v2", 2, devicetest.OfferOpts{})
	next, _ := tb.Offer("evil", 3, devicetest.OfferOpts{Tamper: true, Issued: time.Now().Add(time.Second)})
	if code, stdout, stderr := otad(t, "install", "-c", tb.Cfg.Path, writeEnv(t, first)); code != 0 {
		t.Fatalf("first install: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, stdout, stderr := otad(t, "install", "-c", tb.Cfg.Path, writeEnv(t, next)); code != 0 || !strings.Contains(stdout, "pending") {
		t.Fatalf("the newer offer: exit %d, want pending\n%s%s", code, stdout, stderr)
	}
	code, stdout, stderr := otad(t, "mark-active", "-c", tb.Cfg.Path, "booted")
	if code != ota.ExitFailure {
		t.Errorf("mark-active booted whose pending install failed: exit %d, want %d\n%s%s", code, ota.ExitFailure, stdout, stderr)
	}
	out := stdout + stderr
	for _, want := range []string{"slot A is primary again; the staged install is dropped", "rel-evil", "failed", "hash_mismatch"} {
		if !strings.Contains(out, want) {
			t.Errorf("mark-active booted does not say %q:\n%s%s", want, stdout, stderr)
		}
	}
	if !strings.Contains(stderr, "hash_mismatch") {
		t.Errorf("the failure is not on stderr:\n%s%s", stdout, stderr)
	}
	if j := tb.Journal(); j.Phase != ota.Idle || j.LastResult == nil || j.LastResult.ID != "rel-evil" || j.LastResult.Code != ota.CodeHashMismatch {
		t.Fatalf("journal after mark-active booted: %s %+v", j.Phase, j.LastResult)
	}
	if v, err := tb.Sim().Vars(); err != nil || !strings.HasPrefix(v["BOOT_ORDER"], "A") {
		t.Fatalf("boot order after mark-active booted: %v %v", v, err)
	}
}
