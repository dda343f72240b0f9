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
