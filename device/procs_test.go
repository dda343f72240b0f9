package device

import (
	"runtime"
	"testing"
)

// spareProc adds one P to the runtime's default on two CPUs or more, once,
// and leaves GOMAXPROCS from the environment alone.
func TestSpareProc(t *testing.T) {
	n := runtime.NumCPU()
	spare := n
	if n >= 2 {
		spare = n + 1
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, tc := range []struct {
		name  string
		env   string
		start int
		want  int
	}{
		{"default", "", n, spare},
		{"set already", "", n + 1, n + 1},
		{"a lower limit", "", 1, 1},
		{"the environment's", "2", n, n},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("GOMAXPROCS", tc.env)
			runtime.GOMAXPROCS(tc.start)
			spareProc()
			spareProc()
			if got := runtime.GOMAXPROCS(0); got != tc.want {
				t.Fatalf("GOMAXPROCS %d, want %d (%d CPUs)", got, tc.want, n)
			}
		})
	}
}

// A pipelined install runs with two Ps on one CPU, from the runtime's
// default only, and as it would otherwise elsewhere.
func TestPipelineProcs(t *testing.T) {
	for _, tc := range []struct {
		name        string
		cpus, procs int
		env         string
		want        bool
	}{
		{"one CPU", 1, 1, "", true},
		{"one CPU, GOMAXPROCS set", 1, 1, "1", false},
		{"one CPU, two Ps already", 1, 2, "", false},
		{"two CPUs", 2, 3, "", false},
		{"two CPUs limited to one", 2, 1, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := onlyCPU(tc.cpus, tc.procs, tc.env); got != tc.want {
				t.Fatalf("onlyCPU(%d, %d, %q) = %v, want %v", tc.cpus, tc.procs, tc.env, got, tc.want)
			}
		})
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	end := procsWhile(2)()
	if got := runtime.GOMAXPROCS(0); got != 2 {
		t.Fatalf("GOMAXPROCS %d during the install, want 2", got)
	}
	end()
	if got := runtime.GOMAXPROCS(0); got != 1 {
		t.Fatalf("GOMAXPROCS %d after the install, want 1 as before", got)
	}
}
