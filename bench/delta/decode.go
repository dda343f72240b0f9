package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/otad/otad/internal/testkit/otadrun"
)

// decodeRun is a peer's own decode of its patch into the new image, pinned
// to the cores the device's installs run on: the device's cost of that
// peer, against otad's install of the same update (issue 30).
type decodeRun struct {
	Name    string
	Wall    time.Duration
	CPU     time.Duration
	PeakRSS int64
}

// timedDecode runs a decoder writing the new image to stdout (hashed and
// checked against want), pinned with taskset -c cpus ("" does not pin).
// Peak RSS is VmHWM read while it runs, as otadrun does for otad (wait4's
// maxrss would count this process's own peak, exec being a vfork).
func timedDecode(ctx context.Context, cpus, want, name string, args ...string) (decodeRun, error) {
	argv := append([]string{name}, args...)
	if cpus != "" {
		argv = append([]string{"taskset", "-c", cpus}, argv...)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	h := sha256.New()
	out := bufio.NewWriterSize(h, 1<<20)
	cmd.Stdout = out
	cmd.WaitDelay = 10 * time.Second
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return decodeRun{}, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	status := fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	var hwm int64
	var err error
wait:
	for {
		select {
		case err = <-exited:
			break wait
		case <-tick.C:
			hwm = max(hwm, otadrun.PeakRSS(status))
		}
	}
	wall := time.Since(start)
	if err != nil {
		return decodeRun{}, fmt.Errorf("%s: %w", strings.Join(argv, " "), err)
	}
	if err := out.Flush(); err != nil {
		return decodeRun{}, err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return decodeRun{}, fmt.Errorf("%s decodes to sha256 %s, not the new image's %s", name, got, want)
	}
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		return decodeRun{}, errors.New("no resource usage from wait4 on this platform")
	}
	return decodeRun{
		Name:    name + " decode",
		Wall:    wall,
		CPU:     time.Duration(syscall.TimevalToNsec(ru.Utime) + syscall.TimevalToNsec(ru.Stime)),
		PeakRSS: hwm,
	}, nil
}

// peerDecodes times xdelta3's decode of its patch and bspatch's of bsdiff's
// (when there is one), pinned to cpus as otad's installs are.
func peerDecodes(ctx context.Context, cpus, dir string, p imagePair, f peerFigures, newSHA string) ([]decodeRun, error) {
	window := strconv.FormatInt(xdelta3Window(fileSize(p.old)), 10)
	x, err := timedDecode(ctx, cpus, newSHA, "xdelta3", "-d", "-c", "-B", window, "-s", p.old, filepath.Join(dir, p.name+".xdelta3"))
	if err != nil {
		return nil, err
	}
	runs := []decodeRun{x}
	if f.Bsdiff.Bytes > 0 {
		// bspatch writes a file, not stdout: /dev/stdout is the pipe.
		b, err := timedDecode(ctx, cpus, newSHA, "bspatch", p.old, "/dev/stdout", filepath.Join(dir, p.name+".bsdiff"))
		if err != nil {
			return nil, err
		}
		runs = append(runs, b)
	}
	return runs, nil
}

// bsdiffNeeds is what bsdiff holds to diff old against new: its suffix
// array of 8 bytes per byte of old and its copies of both files, about 17×
// old (bsdiff(1) says max(17n, 9n+m)) plus new.
func bsdiffNeeds(oldSize, newSize int64) int64 { return 17*oldSize + newSize }

// bsdiffFits says whether bsdiff fits: within half the memory available now
// (the machine is shared, and a bsdiff swapping would say nothing), and ""
// when it does, else why not.
func bsdiffFits(oldSize, newSize int64) string {
	avail, err := memAvailable()
	if err != nil {
		return "bsdiff: " + err.Error()
	}
	if need := bsdiffNeeds(oldSize, newSize); need > avail/2 {
		return fmt.Sprintf("bsdiff needs about %.1f GiB (17× the old image), more than half the %.1f GiB available",
			float64(need)/(1<<30), float64(avail)/(1<<30))
	}
	return ""
}

// memAvailable is /proc/meminfo's MemAvailable in bytes.
func memAvailable() (int64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no MemAvailable in /proc/meminfo")
}

// bsdiffPeer makes bsdiff's patch of the pair and checks that bspatch makes
// NEW of it; a pair bsdiff does not fit gets Name saying why and no bytes.
func bsdiffPeer(ctx context.Context, r runner, dir string, p imagePair, newSHA string) (peer, error) {
	if _, err := lookPath("bsdiff"); err != nil {
		return peer{Name: "bsdiff: not installed (apt-get install bsdiff)"}, nil
	}
	if why := bsdiffFits(fileSize(p.old), fileSize(p.new)); why != "" {
		return peer{Name: why}, nil
	}
	patch := filepath.Join(dir, p.name+".bsdiff")
	start := time.Now()
	if err := r.run(ctx, 2*time.Hour, "bsdiff", p.old, p.new, patch); err != nil {
		return peer{}, err
	}
	took := time.Since(start)
	if err := checkDecodes(ctx, r, newSHA, "bspatch", p.old, "/dev/stdout", patch); err != nil {
		return peer{}, err
	}
	return patchPeer("bsdiff 4.3", patch, took)
}
