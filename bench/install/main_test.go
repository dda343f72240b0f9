package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestParseSizeIsPositive(t *testing.T) {
	if _, err := parseSize("0"); err == nil || !strings.Contains(err.Error(), "positive") {
		t.Fatalf("0: %v", err)
	}
	if n, err := parseSize("256MiB"); err != nil || n != 256<<20 {
		t.Fatalf("256MiB: %d %v", n, err)
	}
}

func TestVerdict(t *testing.T) {
	tests := []struct {
		name     string
		minRatio float64
		maxRSS   int64
		ratio    float64
		peak     int64
		want     string
	}{
		{"reference phase", 0, 0, 0.1, 1 << 30, "-"},
		{"both met", 0.9, 32 << 20, 0.95, 20 << 20, "PASS"},
		{"exactly at the targets", 0.8, 32 << 20, 0.8, 32 << 20, "PASS"},
		{"slow", 0.9, 32 << 20, 0.75, 20 << 20, "FAIL (throughput 0.75x < 0.90x)"},
		{"fat", 0.8, 32 << 20, 1.2, 40 << 20, "FAIL (RSS 40.0 MiB > 32 MiB)"},
		{"both missed", 0.8, 32 << 20, 0.5, 33 << 20, "FAIL (throughput 0.50x < 0.80x, RSS 33.0 MiB > 32 MiB)"},
	}
	for _, tt := range tests {
		p := &phaseStats{minRatio: tt.minRatio, maxRSS: tt.maxRSS}
		if got := p.verdict(tt.ratio, tt.peak); got != tt.want {
			t.Errorf("%s: verdict = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestPrintTable(t *testing.T) {
	const size = 100 << 20
	s := func(secs float64, rss int64) sample {
		return sample{dur: time.Duration(secs * float64(time.Second)), rss: rss}
	}
	phases := []*phaseStats{
		{name: "baseline", samples: []sample{s(1, 0), s(2, 0), s(0.5, 0)}}, // median 100 MiB/s
		{name: "fast", minRatio: 0.9, maxRSS: 32 << 20, samples: []sample{s(1, 20<<20), s(1.1, 30<<20), s(0.9, 10<<20)}},
		{name: "slow", minRatio: 0.8, maxRSS: 32 << 20, samples: []sample{s(2, 20<<20), s(2, 20<<20), s(2, 20<<20)}},
	}
	var out bytes.Buffer
	if printTable(&out, phases, size) {
		t.Error("printTable reported success with a missed target")
	}
	for _, want := range []string{"RESULT: FAIL", "PASS", "FAIL (throughput 0.50x < 0.80x)", "30.0 MiB", "100.0"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if !printTable(&out, phases[:2], size) || !strings.Contains(out.String(), "RESULT: PASS") {
		t.Errorf("table of met targets:\n%s", out.String())
	}
}

func TestGenerate(t *testing.T) {
	dir := t.TempDir()
	const size = 5<<20 + 3 // not a multiple of the generator's chunk
	a, b, small := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "small")
	sumA, err := generate(a, size)
	if err != nil {
		t.Fatal(err)
	}
	sumB, err := generate(b, size)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := generate(small, 1<<20); err != nil {
		t.Fatal(err)
	}
	da, _ := os.ReadFile(a)
	db, _ := os.ReadFile(b)
	ds, _ := os.ReadFile(small)
	h := sha256.Sum256(da)
	switch {
	case len(da) != size:
		t.Fatalf("image is %d bytes, want %d", len(da), size)
	case sumA != hex.EncodeToString(h[:]):
		t.Fatalf("returned sha256 %s is not the file's %x", sumA, h)
	case sumA != sumB || !bytes.Equal(da, db):
		t.Fatal("two images of one size differ")
	case !bytes.HasPrefix(da, ds):
		t.Fatal("a smaller image is not a prefix of a larger one")
	case bytes.Count(da[:1<<20], []byte{0}) > 8<<10:
		t.Fatal("image does not look random")
	}
	if _, err := generate(a, size); err == nil {
		t.Fatal("generate overwrote an existing file")
	}
}

func TestAllocateSlot(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "slot")
	const size = 3 << 20
	// An old slot with content is replaced, not reused.
	if err := os.WriteFile(path, bytes.Repeat([]byte{0xaa}, 5<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, prep := range []struct {
		name string
		fn   func(string, int64) error
	}{{slotFallocate, allocateSlot}, {slotZeros, zeroSlot}} {
		if err := prep.fn(path, size); err != nil {
			t.Fatalf("%s: %v", prep.name, err)
		}
		var st unix.Stat_t
		if err := unix.Stat(path, &st); err != nil {
			t.Fatal(err)
		}
		if st.Size != size {
			t.Errorf("%s: slot is %d bytes, want %d", prep.name, st.Size, size)
		}
		if st.Blocks*512 < size {
			t.Errorf("%s: slot has %d bytes of blocks for %d bytes: sparse", prep.name, st.Blocks*512, size)
		}
		b, _ := os.ReadFile(path)
		if !bytes.Equal(b, make([]byte, size)) {
			t.Errorf("%s: slot does not read as zeros", prep.name)
		}
	}
}

func TestParseFlags(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "otad")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args []string
		err  string
	}{
		{[]string{"-otad", exe}, ""},
		{[]string{"-otad", exe, "-size", "8MiB", "-rounds", "1", "-source", "cold", "-slot", "zeros"}, ""},
		{[]string{"-otad", exe, "-before", exe}, ""},
		{[]string{"-otad", exe, "-before", plain}, "-before: " + plain + " is not an executable"},
		{[]string{"-size", "1GiB"}, "-otad: required"},
		{[]string{"-otad", plain}, "not an executable"},
		{[]string{"-otad", filepath.Join(dir, "missing")}, "not an executable"},
		{[]string{"-otad", exe, "-size", "lots"}, "-size"},
		{[]string{"-otad", exe, "-rounds", "0"}, "-rounds"},
		{[]string{"-otad", exe, "-source", "warm"}, "-source"},
		{[]string{"-otad", exe, "-slot", "sparse"}, "-slot"},
		{[]string{"-otad", exe, "extra"}, "unexpected arguments"},
	}
	for _, tt := range tests {
		o, err := parseFlags(tt.args, &bytes.Buffer{})
		if tt.err == "" {
			if err != nil {
				t.Errorf("%q: %v", tt.args, err)
			} else if !filepath.IsAbs(o.otad) {
				t.Errorf("%q: otad path %q is not absolute", tt.args, o.otad)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%q: error %v, want one containing %q", tt.args, err, tt.err)
		}
	}
	if o, err := parseFlags([]string{"-otad", exe, "-cpuprofile", dir}, &bytes.Buffer{}); err != nil || !o.inProcess {
		t.Errorf("-cpuprofile does not imply -inprocess: %+v, %v", o, err)
	}
}

// buildOtad builds the real agent for the end-to-end test.
func buildOtad(t *testing.T) string {
	t.Helper()
	return buildOtadCgo(t, "0")
}

// buildOtadCgo builds otad with CGO_ENABLED=cgo.
func buildOtadCgo(t *testing.T, cgo string) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	bin := filepath.Join(t.TempDir(), "otad")
	cmd := exec.Command(goBin, "build", "-o", bin, "github.com/otad/otad/cmd/otad")
	cmd.Env = append(os.Environ(), "CGO_ENABLED="+cgo)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/otad: %v\n%s", err, out)
	}
	return bin
}

// storageRead finds a phase's row in the table and returns its storage read
// column in MiB.
func storageRead(t *testing.T, out, phase string) int {
	t.Helper()
	// phase, wall, MiB/s, ratio, target, fetched, peak RSS, user/GiB, sys/GiB, storage read
	m := regexp.MustCompile(regexp.QuoteMeta(phase) + `\s+[\d.]+s\s+[\d.]+\s+[\d.]+x\s+\S+\s+(?:[\d.]+ MiB|-)\s+[\d.]+ MiB\s+[\d.]+s\s+[\d.]+s\s+(\d+) MiB`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no table row for %q:\n%s", phase, out)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

func TestRunEndToEnd(t *testing.T) {
	scripts := t.TempDir()
	script := func(name, body string) string {
		p := filepath.Join(scripts, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	otad := buildOtad(t)
	prof := filepath.Join(scripts, "prof")
	tests := []struct {
		name string
		otad string
		args []string
		err  string // "" for success
		want []string
	}{
		{"real otad", otad, []string{"-inprocess", "-cpuprofile", prof, "-before", otad}, "", []string{
			"warm-up (not counted)", "round 1:", "round 2:", "source cached; slot B fallocate",
			"ideal raw, readback off ", "ideal xz, readback on, 1 core ",
			"otad stream raw, readback off ", "otad stream zstd, readback on ", "otad stream xz, readback off, 1 core ",
			"before stream xz, readback on, 1 core ", "slots.Write, readback on",
			"otad chunked, nothing to reuse, readback on, 1 core ", "otad chunked, 1% changed", "otad chunked, kill at 50%+resume",
			"before chunked, nothing to reuse, readback off ", "before chunked, kill at 50%+resume", "RESULT:",
		}},
		{"real otad, cold source, zeroed slot", otad, []string{"-source", "cold", "-slot", "zeros"}, "", []string{"source cold; slot B zeros", "RESULT:"}},
		{"failing otad", script("fail", "echo 'otad: offer refused' >&2; exit 3"), nil, "exit status 3", nil},
		{"otad that writes nothing", script("noop", "exit 0"), nil, "does not hold the image", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
			defer cancel()
			var out bytes.Buffer
			args := append([]string{"-otad", tt.otad, "-size", "4MiB", "-rounds", "2", "-dir", t.TempDir()}, tt.args...)
			err := run(ctx, args, &out, &out)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("run: %v, want an error containing %q\n%s", err, tt.err, out.String())
				}
				return
			}
			if err != nil {
				t.Fatalf("run: %v\n%s", err, out.String())
			}
			for _, w := range tt.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
			// The readback reads the whole slot from storage, not the page cache.
			if n := storageRead(t, out.String(), "otad stream raw, readback on "); n < 4 {
				t.Errorf("otad with readback read %d MiB from storage, want the image's 4 MiB", n)
			}
		})
	}
	profiles, _ := filepath.Glob(filepath.Join(prof, "*.pprof"))
	if len(profiles) != 4 { // 2 in-process phases x 2 rounds
		t.Errorf("CPU profiles %v, want 4", profiles)
	}
}

func TestSelectRows(t *testing.T) {
	base := &phaseStats{name: "ideal raw, readback off"}
	idealZstd := &phaseStats{name: "ideal zstd, readback on"}
	all := []*phase{
		{stats: base},
		{stats: idealZstd},
		{stats: &phaseStats{name: "ideal xz, readback on"}},
		{stats: &phaseStats{name: "otad stream zstd, readback on", ref: idealZstd}},
		{stats: &phaseStats{name: "otad stream raw, readback off", ref: base}},
	}
	names := func(ps []*phase) (n []string) {
		for _, p := range ps {
			n = append(n, p.stats.name)
		}
		return n
	}
	for _, tc := range []struct {
		re   string
		want []string
	}{
		{"", names(all)},
		{"stream zstd", []string{"ideal raw, readback off", "ideal zstd, readback on", "otad stream zstd, readback on"}},
		{"stream raw", []string{"ideal raw, readback off", "otad stream raw, readback off"}},
		{"nothing like it", []string{"ideal raw, readback off"}},
	} {
		var re *regexp.Regexp
		if tc.re != "" {
			re = regexp.MustCompile(tc.re)
		}
		if got := names(selectRows(all, re)); !slices.Equal(got, tc.want) {
			t.Errorf("-rows %q: %q, want %q", tc.re, got, tc.want)
		}
	}
}

// A binary built with cgo maps the C library, which counts in its peak RSS:
// the bench says so, as the shipped build is static.
func TestDynamicallyLinked(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("no C compiler: cgo cannot link otad dynamically here")
	}
	static, dynamic := buildOtad(t), buildOtadCgo(t, "1")
	tests := []struct {
		name string
		bin  string
		want bool
	}{
		{"CGO_ENABLED=0", static, false},
		{"CGO_ENABLED=1", dynamic, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := dynamicallyLinked(tt.bin)
			if err != nil || got != tt.want {
				t.Fatalf("dynamicallyLinked(%s) = %v, %v; want %v", tt.bin, got, err, tt.want)
			}
			var out strings.Builder
			warnDynamic(&out, []labelledBinary{{"otad", tt.bin}})
			if strings.Contains(out.String(), "dynamically linked") != tt.want {
				t.Errorf("warnDynamic said %q", out.String())
			}
		})
	}
}
