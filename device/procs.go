package device

import (
	"os"
	"runtime"
)

// spareProc gives the Go runtime one P (a thread that runs goroutines) more
// than the CPUs it may use, on a device with two or more. An install writes
// its slot with O_DIRECT: the write holds its thread until the storage has
// the bytes, and the goroutine coming back from it needs a P. With one P a
// CPU, the chunked install's lanes, which fetch and check chunks ahead of
// the writer, hold them all, and the writer and the image's hash queue behind
// them while the storage idles; with a spare one the kernel runs whichever
// thread woke, as it does for any program that sleeps more than it computes.
// A chunked install of 1 GiB (read-back off) took 0.82x the time of the build
// before with the lanes' rings and it, 0.90x with the rings alone
// (docs/design.md, "Writing a slot"). On one CPU the runtime's own default
// stays: a second P there spun on it, CPU a device pays for before wall
// time. GOMAXPROCS in the environment (the operator's choice, e.g. in the
// unit file) is left as it is.
func spareProc() {
	if os.Getenv("GOMAXPROCS") != "" {
		return
	}
	// Only from the runtime's default of one P a CPU (not one a CPU limit
	// lowered): a second call leaves it as the first set it.
	if n := runtime.NumCPU(); n >= 2 && runtime.GOMAXPROCS(0) == n {
		runtime.GOMAXPROCS(n + 1)
	}
}
