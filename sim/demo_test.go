package sim

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	simboot "github.com/otad/otad/bootctl/sim"
	"github.com/otad/otad/internal/cli"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/sim/demo"
)

// TestMain lets this test binary stand in for otasim when the demo's devices
// run their health check (`<os.Executable()> demo health-check ...`).
func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == "demo" && os.Args[2] == "health-check" {
		os.Exit(Run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// otasim runs the command line in this process.
func otasim(args ...string) (code int, stdout, stderr string) {
	var out, errOut strings.Builder
	code = Run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// The whole demo, in-process: five real agents, a good rollout, a broken one.
func TestDemo(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "work")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	start := time.Now()
	var out, errOut strings.Builder
	code := Run(ctx, []string{"demo", "--dir", dir, "--timeout", "60s"}, &out, &errOut)
	stdout, stderr := out.String(), errOut.String()
	t.Logf("demo took %v", time.Since(start))
	if code != ota.ExitOK {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	_, summary, ok := strings.Cut(stdout, "\nsummary\n")
	if !ok {
		t.Fatalf("no summary in the output:\n%s", stdout)
	}
	// DEVICE BOOTED RUNNING ROLLOUT-1 TOOK FETCHED ROLLOUT-2 TOOK FETCHED BOOTS
	var rows [][]string
	for line := range strings.Lines(summary) {
		if f := strings.Fields(line); len(f) == 10 && strings.HasPrefix(f[0], "gw-") {
			rows = append(rows, f)
		}
	}
	if len(rows) != 5 {
		t.Fatalf("summary has %d device rows, want 5:\n%s", len(rows), summary)
	}
	for i, m := range rows {
		id, booted, running, r1, r2, boots := m[0], m[1], m[2], m[3], m[6], m[9]
		if want := "gw-0" + string(rune('1'+i)); id != want {
			t.Errorf("row %d is %s, want %s", i, id, want)
		}
		// The good image went to B; the broken one to A, and the device came back to B.
		// Rollout 2 goes through otactl rollout: gw-01, the canary, fails
		// its health check, the rollout halts, nobody else gets 2.1.0.
		canary := id == "gw-01"
		wantR2, wantBoots := "-", "2" // power on, reboot into 2.0.0
		if canary {
			wantR2, wantBoots = "failed/health_check_failed", "4" // and into 2.1.0, and back out of it
		}
		if booted != "B" || running != "2.0.0" || r1 != "success" || r2 != wantR2 {
			t.Errorf("%s: booted %s running %s, rollout 1 %s, rollout 2 %s; want B 2.0.0 success %s",
				id, booted, running, r1, r2, wantR2)
		}
		if boots != wantBoots {
			t.Errorf("%s: %s boots, want %s", id, boots, wantBoots)
		}
		tooks := []string{m[4]}
		if canary {
			tooks = append(tooks, m[7])
		}
		for _, took := range tooks {
			if d, err := time.ParseDuration(took); err != nil || d <= 0 || d > time.Minute {
				t.Errorf("%s: took %q", id, took)
			}
		}
		devDir := filepath.Join(dir, "devices", id)
		if canary {
			// The chunked 2.1.0 differs from 2.0.0 in 3 chunks of 64 KiB: the
			// device fetches those and the index, a fraction of the first rollout.
			f1, err1 := cli.ParseBytes(m[5])
			f2, err2 := cli.ParseBytes(m[8])
			if err1 != nil || err2 != nil || f2 == 0 || f2 > 3*64<<10+8<<10 || f2*3 > f1 {
				t.Errorf("%s: fetched %s for rollout 1 and %s for the chunked rollout 2", id, m[5], m[8])
			}
			// What the slots hold, read directly: the health check's view.
			for slot, marker := range map[string]string{"A": demo.BrokenMarker + " version=2.1.0\n", "B": demo.GoodMarker + " version=2.0.0\n"} {
				b, err := os.ReadFile(filepath.Join(devDir, "slot"+slot+".img"))
				if err != nil || !strings.HasPrefix(string(b), marker) {
					t.Errorf("%s: slot %s does not start with %q (err %v)", id, slot, marker, err)
				}
			}
		}
		s, err := simboot.Open(filepath.Join(devDir, "bootenv.json"), 3)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := s.Booted(); err != nil || got != "B" {
			t.Errorf("%s: sim bootloader booted %q (%v), want B", id, got, err)
		}
		if vars, _ := s.Vars(); canary && vars["BOOT_A_LEFT"] != "0" {
			t.Errorf("%s: slot A (the broken image) is not marked bad: %v", id, vars)
		}
		if log, err := os.ReadFile(filepath.Join(devDir, "otad.log")); canary && (err != nil || !strings.Contains(string(log), "health")) {
			t.Errorf("%s: device log lacks the health check (err %v)", id, err)
		}
	}
	for _, want := range []string{
		"$ otactl keygen release", "--compress zstd", "--chunked", "publishing rollout 2.0.0 to group \"demo\"",
		"rolled back", "work directory kept: " + dir,
		"dashboard: http://127.0.0.1:", "$ otactl rollout check --broker", "  wave 1: 1 device: gw-01",
		"$ otactl rollout start --broker", "rollout demo-2_1_0 HALTED", "gw-01  failed  health_check_failed",
		"otactl rollout abort --withdraw",
		"the dashboard, the broker and the devices stop now; to keep them up for a look: make demo DEMO_FLAGS=--keep",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, "\x1b[") {
		t.Error("terminal escapes written to a non-terminal")
	}
}

// A step that does not converge ends the demo with exit 1, a message naming
// the devices' states, and the work directory kept for a look.
func TestDemoTimeout(t *testing.T) {
	code, stdout, stderr := otasim("demo", "--devices", "1", "--timeout", "1ms")
	if code != ota.ExitFailure {
		t.Fatalf("exit %d, want 1\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "not done within 1ms") || !strings.Contains(stderr, "gw-01") {
		t.Errorf("stderr: %s", stderr)
	}
	_, kept, _ := strings.Cut(stdout, "work directory is kept for a look: ")
	kept, _, _ = strings.Cut(kept, " ")
	if kept == "" {
		t.Fatalf("work directory not reported:\n%s", stdout)
	}
	defer os.RemoveAll(kept)
	if _, err := os.Stat(filepath.Join(kept, "devices", "gw-01", "otad.toml")); err != nil {
		t.Errorf("work directory not kept: %v", err)
	}
}

func TestDemoUsage(t *testing.T) {
	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args   []string
		stderr string
	}{
		{[]string{"demo", "extra"}, "unexpected arguments"},
		{[]string{"demo", "--devices", "0"}, "--devices 0"},
		{[]string{"demo", "--devices", "21"}, "--devices 21"},
		{[]string{"demo", "--timeout", "0s"}, "--timeout"},
		{[]string{"demo", "--rate", "fast"}, "--rate"},
		{[]string{"demo", "--image-size", "1KiB"}, "--image-size"},
		{[]string{"demo", "--image-size", "9MiB"}, "--image-size"},
		{[]string{"demo", "--dir", full}, "not empty"},
		{[]string{"demo", "health-check", "--env", "x"}, "--slot-a"},
	}
	for _, tt := range tests {
		code, _, stderr := otasim(tt.args...)
		if code != ota.ExitUsage || !strings.Contains(stderr, tt.stderr) {
			t.Errorf("otasim %v: exit %d, stderr %q; want 2 and %q", tt.args, code, stderr, tt.stderr)
		}
	}
	if _, stdout, _ := otasim("help"); !strings.Contains(stdout, "demo") {
		t.Errorf("help does not list demo:\n%s", stdout)
	}
}

func TestDemoHealthCheckCommand(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.img")
	broken := filepath.Join(dir, "broken.img")
	for path, spec := range map[string]demo.ImageSpec{
		good:   {Version: "2.0.0", Size: 4096},
		broken: {Version: "2.1.0", Broken: true, Size: 4096},
	} {
		if _, err := demo.WriteImageFile(path, spec); err != nil {
			t.Fatal(err)
		}
	}
	env := filepath.Join(dir, "bootenv.json")
	if _, err := simboot.Open(env, 3); err != nil { // booted A
		t.Fatal(err)
	}
	tests := []struct {
		slotA, slotB string
		code         int
		out          string
	}{
		{good, broken, ota.ExitOK, "slot A runs a good image"},
		{broken, good, ota.ExitFailure, "slot A (" + broken + ") runs a broken image"},
		{filepath.Join(dir, "absent"), good, ota.ExitFailure, "no such file"},
	}
	for _, tt := range tests {
		code, stdout, stderr := otasim("demo", "health-check", "--env", env, "--slot-a", tt.slotA, "--slot-b", tt.slotB)
		if code != tt.code || !strings.Contains(stdout+stderr, tt.out) {
			t.Errorf("slot A %s: exit %d, output %q%q; want %d and %q", tt.slotA, code, stdout, stderr, tt.code, tt.out)
		}
	}
}
