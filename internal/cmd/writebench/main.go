// Command writebench measures the slot writer against a plain copy.
//
//	go run ./internal/cmd/writebench -size 1GiB -dir DIR
//
// It writes a deterministic pseudo-random image into DIR, serves it over HTTP
// on 127.0.0.1 and prints, in one run: (1) the baseline — read the file,
// SHA-256, write to a file, one final fsync; (2) slots.Write over HTTP with
// readback off; (3) with readback on; each in MiB/s with its ratio to the
// baseline and the process's peak RSS during that phase.
package main

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/otad/otad/slots"
	"golang.org/x/sys/unix"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		slog.Error("writebench", "err", err)
		os.Exit(1)
	}
}

type result struct {
	name    string
	dur     time.Duration
	cpu     time.Duration // user+system time of the whole process
	peakRSS int64
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("writebench", flag.ContinueOnError)
	sizeFlag := fs.String("size", "1GiB", "image size (bytes, or with KiB/MiB/GiB)")
	dir := fs.String("dir", os.TempDir(), "directory for the image and the slot files (use the storage under test)")
	drop := fs.Bool("drop-caches", true, "sync and drop the page cache before each phase (needs root)")
	keep := fs.Bool("keep", false, "keep the files afterwards")
	rounds := fs.Int("rounds", 3, "rounds of the three phases, interleaved; medians are reported (shared virtual disks are noisy)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	size, err := parseSize(*sizeFlag)
	if err != nil {
		return fmt.Errorf("-size: %w", err)
	}
	work, err := os.MkdirTemp(*dir, "writebench-")
	if err != nil {
		return err
	}
	if !*keep {
		defer os.RemoveAll(work)
	}
	image := filepath.Join(work, "image.bin")
	t0 := time.Now()
	sum, err := generate(image, size)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "image: %s, %d bytes, sha256 %s, generated in %v\n", image, size, sum, time.Since(t0).Round(time.Millisecond))
	debug.FreeOSMemory()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeFile(w, r, image)
	}), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	url := "http://" + ln.Addr().String() + "/image.bin"

	dropCaches := func() {
		if *drop {
			unix.Sync()
			if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0); err != nil {
				fmt.Fprintf(out, "(cannot drop caches: %v)\n", err)
				*drop = false
			}
		}
	}
	phase := func(name string, f func(target string) error) (result, error) {
		target := filepath.Join(work, strings.ReplaceAll(name, " ", "-")+".slot")
		if err := preallocate(target, size); err != nil {
			return result{}, err
		}
		defer os.Remove(target)
		dropCaches()
		// Return earlier phases' garbage so that the peak is this phase's own.
		debug.FreeOSMemory()
		resetPeakRSS()
		cpu0 := cpuTime()
		start := time.Now()
		if err := f(target); err != nil {
			return result{}, fmt.Errorf("%s: %w", name, err)
		}
		return result{name: name, dur: time.Since(start), cpu: cpuTime() - cpu0, peakRSS: peakRSS()}, nil
	}

	job := func(target string, readback bool) slots.Job {
		return slots.Job{URL: url, Compression: "none", Size: size, SHA256: sum, Target: target, Readback: readback}
	}
	phases := []struct {
		name string
		f    func(target string) error
	}{
		{"baseline", func(target string) error { return baseline(image, target, sum) }},
		{"slots readback off", func(target string) error { return slots.Write(ctx, job(target, false)) }},
		{"slots readback on", func(target string) error { return slots.Write(ctx, job(target, true)) }},
	}
	results := make([][]result, len(phases))
	mib := float64(size) / (1 << 20)
	rate := func(r result) float64 { return mib / r.dur.Seconds() }
	for round := range max(*rounds, 1) {
		line := fmt.Sprintf("round %d:", round+1)
		for i, ph := range phases {
			r, err := phase(ph.name, ph.f)
			if err != nil {
				return err
			}
			results[i] = append(results[i], r)
			line += fmt.Sprintf("  %s %.1f MiB/s", ph.name, rate(r))
		}
		fmt.Fprintln(out, line)
	}
	med := make([]result, len(phases))
	for i := range phases {
		med[i] = median(results[i])
	}
	fmt.Fprintf(out, "medians of %d rounds:\n", max(*rounds, 1))
	fmt.Fprintf(out, "%-20s %10s %10s %8s %10s %12s\n", "phase", "time", "MiB/s", "ratio", "CPU", "peak RSS")
	for _, r := range med {
		fmt.Fprintf(out, "%-20s %10v %10.1f %7.2fx %10v %8.1f MiB\n", r.name, r.dur.Round(time.Millisecond), rate(r), rate(r)/rate(med[0]), r.cpu.Round(time.Millisecond), float64(r.peakRSS)/(1<<20))
	}
	return nil
}

// median returns the result of median duration (and the largest peak RSS).
func median(rs []result) result {
	sorted := append([]result(nil), rs...)
	slices.SortFunc(sorted, func(a, b result) int { return cmp.Compare(a.dur, b.dur) })
	m := sorted[len(sorted)/2]
	for _, r := range rs {
		m.peakRSS = max(m.peakRSS, r.peakRSS)
	}
	return m
}

// generate writes a deterministic ChaCha8 stream of size bytes to path and
// returns its sha256.
func generate(path string, size int64) (string, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", err
	}
	defer f.Close()
	rng := rand.NewChaCha8([32]byte{'o', 't', 'a', 'd'})
	h := sha256.New()
	buf := make([]byte, 4<<20)
	for left := size; left > 0; {
		b := buf[:min(int64(len(buf)), left)]
		rng.Read(b)
		h.Write(b)
		if _, err := f.Write(b); err != nil {
			return "", err
		}
		left -= int64(len(b))
	}
	if err := f.Sync(); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), f.Close()
}

// preallocate makes a slot-like target: an existing file of the full size
// whose blocks are allocated, as a partition's are.
func preallocate(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
		if err := f.Truncate(size); err != nil {
			return err
		}
	}
	return f.Sync()
}

// baseline is the plain copy the writer is measured against.
func baseline(image, target, want string) error {
	in, err := os.Open(image)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(target, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer out.Close()
	h := sha256.New()
	buf := make([]byte, 4<<20)
	for {
		n, err := io.ReadFull(in, buf)
		if n > 0 {
			h.Write(buf[:n])
			if _, werr := out.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return err
		}
	}
	if err := out.Sync(); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return fmt.Errorf("baseline sha256 %s, want %s", got, want)
	}
	return nil
}

// cpuTime is the process's user+system CPU time so far.
func cpuTime() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// resetPeakRSS clears VmHWM so that the next reading covers one phase.
func resetPeakRSS() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

func peakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return -1
}

func parseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}, {"B", 1}}
	mult := int64(1)
	for _, u := range units {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = v, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return 0, err
	}
	if n <= 0 {
		return 0, errors.New("size must be positive")
	}
	return n * mult, nil
}
