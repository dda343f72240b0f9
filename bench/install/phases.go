package main

import (
	"context"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	"github.com/otad/otad/internal/testkit/otadrun"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/slots"
	"golang.org/x/sys/unix"
)

// sample is one phase's measurement in one round.
type sample struct {
	dur       time.Duration
	cpu       time.Duration // user+system
	user, sys time.Duration
	rss       int64 // peak resident set, bytes
	// fromStorage is what the phase read from storage (not the page cache),
	// from the kernel's per-task I/O accounting: it shows that the readback
	// really reads the slot back.
	fromStorage int64
	// written is when the image was all written and synced (in-process
	// phases only, from the writer's progress reports; 0 when unknown): the
	// rest of dur is the readback's tail.
	written time.Duration
	// fetched is what the image server sent during the phase.
	fetched int64
}

// writeInProcess runs the slot writer alone in this process: no agent, no
// offer checks, no process start, and a CPU profile can cover it.
func writeInProcess(ctx context.Context, job slots.Job) (sample, error) {
	var s sample
	var written time.Duration
	err := inProcess(&s, func() error {
		start := time.Now()
		// The writer's last "downloading" report of the whole size comes
		// once its final fdatasync returned (an earlier one may come when
		// the last chunk is written), before the readback's own end.
		job.Progress = func(p ota.Progress) {
			if p.Phase == ota.Downloading && p.BytesDone == p.BytesTotal {
				written = time.Since(start)
			}
		}
		if err := slots.Write(ctx, job); err != nil {
			return fmt.Errorf("slots.Write: %w", err)
		}
		return nil
	})
	s.written = written
	return s, err
}

// inProcess times fn and takes this process's CPU time, storage reads and
// peak RSS (reset first, so the peak is fn's) over it.
func inProcess(s *sample, fn func() error) error {
	// Return earlier phases' garbage, so that the peak is this phase's own.
	debug.FreeOSMemory()
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) // resets VmHWM
	var ru0, ru1 unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru0)
	start := time.Now()
	err := fn()
	s.dur = time.Since(start)
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru1)
	s.user = time.Duration(ru1.Utime.Nano() - ru0.Utime.Nano())
	s.sys = time.Duration(ru1.Stime.Nano() - ru0.Stime.Nano())
	s.cpu = s.user + s.sys
	s.fromStorage = (ru1.Inblock - ru0.Inblock) * 512
	s.rss = selfPeakRSS()
	return err
}

// selfPeakRSS reads this process's VmHWM; -1 when unknown.
func selfPeakRSS() int64 {
	if n := otadrun.PeakRSS("/proc/self/status"); n > 0 {
		return n
	}
	return -1
}

// installOtad runs `otad install -c cfg envelope` as its own process (no
// daemon listens, so it installs in-process under the state lock) and takes
// its wall time from exec to exit and its CPU and storage reads from wait4.
func installOtad(ctx context.Context, bin, cfg, envelope string) (sample, error) {
	return runOtad(ctx, "", bin, cfg, envelope, nil)
}

// runOtad is installOtad pinned to cpus (taskset -c; "" does not pin); kill, when set, is asked every millisecond and
// ends otad with SIGKILL when it says so, which is then no error. Peak RSS
// is otad's VmHWM (otadrun.Install says why not wait4's maxrss).
func runOtad(ctx context.Context, cpus, bin, cfg, envelope string, kill func() bool) (sample, error) {
	r, err := otadrun.InstallPinned(ctx, cpus, bin, cfg, envelope, kill)
	if err != nil {
		return sample{}, err
	}
	return sample{dur: r.Wall, cpu: r.CPU, user: r.User, sys: r.Sys, rss: r.PeakRSS, fromStorage: r.FromStorage}, nil
}
