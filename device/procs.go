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
// stays for all else (pipelinedProcs). GOMAXPROCS in the environment (the
// operator's choice, e.g. in the unit file) is left as it is.
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

// pipelinedProcs is the daemon's slots.Job.Pipelined: on a one-CPU device,
// a second P while a compressed stream install writes, nil elsewhere. There
// an O_DIRECT write holds the one P until the storage has the bytes, and
// once it returns the writer waits for it behind the decoder while the
// storage idles; with two, the kernel runs whichever thread woke. Pinned to
// one core, a stream zstd install of 1 GiB took 0.84-0.87x the time and
// xz 0.82-0.86x, at the same CPU. A raw stream (0.94x, at 9% more CPU) and the
// chunked installs (up to 17% more CPU on a real ext4 image) keep one P:
// there the second one's thread woke and spun on the CPU more than it
// saved (docs/design.md, "Writing a slot").
func pipelinedProcs() func() (end func()) {
	if !onlyCPU(runtime.NumCPU(), runtime.GOMAXPROCS(0), os.Getenv("GOMAXPROCS")) {
		return nil
	}
	return procsWhile(2)
}

// procsWhile is a Pipelined that runs the runtime with n Ps until end.
func procsWhile(n int) func() (end func()) {
	return func() func() {
		was := runtime.GOMAXPROCS(n)
		return func() { runtime.GOMAXPROCS(was) }
	}
}

// onlyCPU reports whether otad runs on one CPU (of cpus) with the runtime's
// default of one P (of procs), GOMAXPROCS (env) unset: pipelinedProcs's case.
func onlyCPU(cpus, procs int, env string) bool {
	return cpus == 1 && procs == 1 && env == ""
}
