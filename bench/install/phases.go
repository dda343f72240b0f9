package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/otad/otad/internal/testkit/testtool"
	"github.com/otad/otad/slots"
	"golang.org/x/sys/unix"
)

// sample is one phase's measurement in one round.
type sample struct {
	dur time.Duration
	cpu time.Duration // user+system
	rss int64         // peak resident set, bytes
	// fromStorage is what the phase read from storage (not the page cache),
	// from the kernel's per-task I/O accounting: it shows that the readback
	// really reads the slot back.
	fromStorage int64
	// written is when the image was all written and synced (in-process
	// phases only, from the writer's progress reports; 0 when unknown): the
	// rest of dur is the readback's tail.
	written time.Duration
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
		job.Progress = func(p slots.Progress) {
			if p.Phase == slots.PhaseDownloading && p.BytesDone == p.BytesTotal {
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
	s.cpu = time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
	s.fromStorage = (ru1.Inblock - ru0.Inblock) * 512
	s.rss = selfPeakRSS()
	return err
}

// selfPeakRSS reads VmHWM from /proc/self/status; -1 when unknown.
func selfPeakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return -1
}

// installOtad runs `otad install -c cfg envelope` as its own process (no
// daemon listens, so it installs in-process under the state lock) and takes
// its wall time from exec to exit and its resource use from wait4.
func installOtad(ctx context.Context, bin, cfg, envelope string) (sample, error) {
	cmd := exec.CommandContext(ctx, bin, "install", "-c", cfg, envelope)
	out := &testtool.Buffer{Max: 2000} // the end of its output, for an error
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	err := cmd.Run()
	dur := time.Since(start)
	if err != nil {
		return sample{}, fmt.Errorf("%s install -c %s %s: %w\n%s", bin, cfg, envelope, err, strings.TrimSpace(out.String()))
	}
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		return sample{}, errors.New("no resource usage from wait4 on this platform")
	}
	return sample{
		dur:         dur,
		cpu:         time.Duration(syscall.TimevalToNsec(ru.Utime) + syscall.TimevalToNsec(ru.Stime)),
		rss:         ru.Maxrss << 10, // KiB on Linux
		fromStorage: ru.Inblock * 512,
	}, nil
}
