package otadrun

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestPeakRSS(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		status string
		want   int64
	}{
		{"Name:\totad\nVmPeak:\t  20000 kB\nVmHWM:\t    9316 kB\nVmRSS:\t 9000 kB\n", 9316 << 10},
		{"Name:\totad\n", 0},
		{"VmHWM:\tlots kB\n", 0},
	} {
		p := filepath.Join(dir, "status")
		if err := os.WriteFile(p, []byte(tt.status), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := PeakRSS(p); got != tt.want {
			t.Errorf("PeakRSS(%q) = %d, want %d", tt.status, got, tt.want)
		}
	}
	if got := PeakRSS(filepath.Join(dir, "absent")); got != 0 {
		t.Errorf("PeakRSS of no file = %d", got)
	}
	if got := PeakRSS("/proc/self/status"); got <= 0 {
		t.Errorf("PeakRSS of this process = %d", got)
	}
}

// fakeOtad writes a shell script standing in for otad.
func fakeOtad(t *testing.T, body string) string {
	p := filepath.Join(t.TempDir(), "otad")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestInstall(t *testing.T) {
	ctx := context.Background()
	// The arguments reach otad in order; its peak RSS and time are taken.
	ok := fakeOtad(t, `[ "$1 $2 $3 $4" = "install -c CFG ENV" ] || { echo "bad args: $*"; exit 3; }; sleep 0.2`)
	s, err := Install(ctx, ok, "CFG", "ENV", nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Wall < 200*time.Millisecond || s.PeakRSS <= 0 || s.Killed {
		t.Fatalf("sample %+v: want a wall time of 200ms or more, a peak RSS, not killed", s)
	}
	// A failure carries otad's output.
	_, err = Install(ctx, fakeOtad(t, "echo 'install: chunk_mismatch' >&2; exit 1"), "CFG", "ENV", nil)
	if err == nil || !strings.Contains(err.Error(), "chunk_mismatch") {
		t.Fatalf("failure: %v", err)
	}
	// Killed when kill says so: no error.
	slow := fakeOtad(t, "exec sleep 30")
	start := time.Now()
	s, err = Install(ctx, slow, "CFG", "ENV", func() bool { return time.Since(start) > 100*time.Millisecond })
	if err != nil || !s.Killed {
		t.Fatalf("kill: %+v, %v", s, err)
	}
	// A run that ends before it is killed is an error.
	if _, err := Install(ctx, ok, "CFG", "ENV", func() bool { return false }); err == nil || !strings.Contains(err.Error(), "before it was killed") {
		t.Fatalf("no kill: %v", err)
	}
}

func TestStatus(t *testing.T) {
	ctx := context.Background()
	var st struct {
		State string `json:"state"`
	}
	if err := Status(ctx, fakeOtad(t, `echo '{"state":"idle"}'`), "CFG", &st); err != nil || st.State != "idle" {
		t.Fatalf("Status: %+v, %v", st, err)
	}
	if err := Status(ctx, fakeOtad(t, `echo 'not json'`), "CFG", &st); err == nil || !strings.Contains(err.Error(), "status --json") {
		t.Fatalf("bad JSON: %v", err)
	}
	if err := MarkGood(ctx, fakeOtad(t, `echo 'no install to commit' >&2; exit 1`), "CFG"); err == nil || !strings.Contains(err.Error(), "no install to commit") {
		t.Fatalf("MarkGood failure: %v", err)
	}
}

func TestMedian(t *testing.T) {
	tests := []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{5}, 5},
		{[]float64{3, 1, 2}, 2},
		{[]float64{400, 100, 300, 200}, 250},
		{[]float64{9, 1, 1, 1, 9}, 1},
	}
	for _, tt := range tests {
		in := append([]float64(nil), tt.in...)
		if got := Median(tt.in); got != tt.want {
			t.Errorf("Median(%v) = %v, want %v", tt.in, got, tt.want)
		}
		for i := range in {
			if in[i] != tt.in[i] {
				t.Fatalf("Median reordered its input: %v, was %v", tt.in, in)
			}
		}
	}
}
