// Package otadrun runs the otad binary's local commands as their own
// processes, for the benchmarks: `otad install` timed from exec to exit,
// with its CPU time, storage reads and peak RSS; `otad mark-good`; and
// `otad status --json`, decoded; and the median the benchmarks report.
package otadrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/otad/otad/internal/testkit/testtool"
)

// Sample is one `otad install` run.
type Sample struct {
	Wall time.Duration
	CPU  time.Duration // user+system
	User time.Duration
	Sys  time.Duration
	// PeakRSS is otad's VmHWM in bytes.
	PeakRSS int64
	// FromStorage is what otad read from storage (not the page cache),
	// from the kernel's per-task I/O accounting.
	FromStorage int64
	// Killed says kill ended the run.
	Killed bool
}

// Install runs `otad install -c cfg envelope` (no daemon listens, so it
// installs in-process under the state lock). kill, when set, is asked every
// millisecond and ends otad with SIGKILL when it says so, which is then no
// error; it must: a run that ends first is one.
//
// Peak RSS is otad's VmHWM, read from /proc while it runs: wait4's maxrss
// is no good here, because os/exec starts otad with vfork, and Linux counts
// the parent's peak RSS (the benchmark's, at exec time) into the child's
// maxrss. VmHWM only grows, so the last reading before exit misses at most
// the last millisecond.
func Install(ctx context.Context, bin, cfg, envelope string, kill func() bool) (Sample, error) {
	return InstallPinned(ctx, "", bin, cfg, envelope, kill)
}

// InstallPinned is Install with otad pinned to the processors cpus names
// (taskset -c, as "0" or "0,1"): on one core, the network, decompression,
// hashing and the writer share it as on a one-core device. "" does not pin.
func InstallPinned(ctx context.Context, cpus, bin, cfg, envelope string, kill func() bool) (Sample, error) {
	cmd := exec.CommandContext(ctx, bin, "install", "-c", cfg, envelope)
	if cpus != "" {
		// taskset execs otad in its own process: the PID, wait4's usage and VmHWM are otad's.
		cmd = exec.CommandContext(ctx, "taskset", "-c", cpus, bin, "install", "-c", cfg, envelope)
	}
	out := &testtool.Buffer{Max: 2000} // the end of its output, for an error
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return Sample{}, fmt.Errorf("%s: %w", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	status := fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)
	var hwm int64
	killed := false
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	var err error
wait:
	for {
		select {
		case err = <-exited:
			break wait
		case <-tick.C:
			hwm = max(hwm, PeakRSS(status))
			if kill != nil && !killed && kill() {
				killed = cmd.Process.Signal(syscall.SIGKILL) == nil
			}
		}
	}
	wall := time.Since(start)
	if err != nil && !killed {
		return Sample{}, fmt.Errorf("%s install -c %s %s: %w\n%s", bin, cfg, envelope, err, strings.TrimSpace(out.String()))
	}
	if kill != nil && !killed {
		return Sample{}, fmt.Errorf("%s install -c %s %s ended before it was killed:\n%s", bin, cfg, envelope, strings.TrimSpace(out.String()))
	}
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		return Sample{}, errors.New("no resource usage from wait4 on this platform")
	}
	return Sample{
		Wall:        wall,
		CPU:         time.Duration(syscall.TimevalToNsec(ru.Utime) + syscall.TimevalToNsec(ru.Stime)),
		User:        time.Duration(syscall.TimevalToNsec(ru.Utime)),
		Sys:         time.Duration(syscall.TimevalToNsec(ru.Stime)),
		PeakRSS:     hwm,
		FromStorage: ru.Inblock * 512,
		Killed:      killed,
	}, nil
}

// PeakRSS reads VmHWM from a /proc/PID/status file; 0 when unknown.
func PeakRSS(status string) int64 {
	b, err := os.ReadFile(status)
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}

// Median is the median of xs (the mean of the middle two for an even
// count; 0 for none), leaving xs as it was: the benchmarks report medians
// over their rounds, the machine being shared and noisy.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := len(s) / 2
	if len(s)%2 == 0 {
		return (s[m-1] + s[m]) / 2
	}
	return s[m]
}

// MarkGood runs `otad mark-good -c cfg`: the booted slot committed.
func MarkGood(ctx context.Context, bin, cfg string) error {
	_, err := command(ctx, bin, "mark-good", "-c", cfg)
	return err
}

// Status runs `otad status --json -c cfg` and decodes the snapshot into v
// (an ota.Status, or a type of the caller's for fields ota does not name).
func Status(ctx context.Context, bin, cfg string, v any) error {
	b, err := command(ctx, bin, "status", "--json", "-c", cfg)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s status --json: %w", bin, err)
	}
	return nil
}

// command runs a short otad command (bounded: a minute) and returns its stdout.
func command(ctx context.Context, bin string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var stdout, stderr testtool.Buffer
	stderr.Max = 2000
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %s: %w\n%s", bin, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return []byte(stdout.String()), nil
}
