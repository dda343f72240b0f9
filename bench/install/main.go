// Command installbench is `make bench` (issue 2): it installs an image with
// the real otad binary and compares it with a plain copy measured in the same
// run on the same machine.
//
//	go run ./bench/install -otad bin/otad -size 1GiB [-rounds 3] [-dir DIR]
//
// It generates a deterministic pseudo-random image once, serves it on
// 127.0.0.1 with net/http, and lays out a file-backed device (sim bootloader,
// slot files, a trust directory with a fresh key, a signed offer). Each round
// then runs, in rotating order (after one uncounted baseline as a warm-up):
//
//   - baseline: read the image, SHA-256 it, write it to a fresh file in the
//     same directory, one final fsync — in this process, no agent;
//   - `otad install -c CFG OFFER` as a subprocess with [slots] readback = false;
//   - the same with readback at its default (on);
//   - chunked payloads (issue 10, readback off, chunked.go): the same image
//     with nothing to reuse (held against the stream install's throughput),
//     an update changing 1% of its chunks (wall time and bytes fetched), and
//     the first killed with SIGKILL at 50% of its download and started
//     again (bytes fetched in all).
//
// With -inprocess, two reference phases run slots.Write alone in this
// process (readback off and on), to tell the agent's and the process's costs
// from the writer's; -cpuprofile DIR profiles them for `go tool pprof`.
//
// Throughput is the image size over the wall time from exec to exit (the
// baseline: from open to fsync). Peak RSS is the otad process's VmHWM
// (runOtad says why not wait4's maxrss). The table shows medians over the rounds (the machine is shared and
// noisy), ratios to the baseline's median, and PASS/FAIL against the targets:
// readback off at least 0.9x, on at least 0.8x, the chunked install at
// least 0.9x the stream install, otad's peak RSS at most 16 MiB. It exits 0
// when a target is missed: it is a report.
//
// Fairness choices:
//   - Source page cache (-source): "cached" (default) reads the image through
//     before every phase, so no phase reads it from storage: on a device the
//     payload comes from the network, and reading it from the disk under test
//     would compete with the slot writes being measured. "cold" drops it
//     (posix_fadvise DONTNEED) before every phase instead. Either way all
//     phases find the source in the same state.
//   - Slot B (-slot): "fallocate" (default) recreates it before every install
//     as a file of the image size with allocated, unwritten blocks: every
//     round writes freshly allocated blocks as the baseline's fresh file does,
//     and the slot is never a sparse file that grows as it is written.
//     "zeros" writes it with zeros once, so installs overwrite written blocks
//     as on a partition (cheaper for the filesystem than the baseline's
//     fresh file).
//   - Before every phase the bench calls sync(2), so no phase pays for
//     another's writeback; otad and the writer drop the slot's pages as they
//     go, the baseline's copy is unlinked after it, and each slot check drops
//     the pages it read.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sync/atomic"
	"time"

	"github.com/otad/otad/internal/cli"
	"github.com/otad/otad/internal/demo"
	"github.com/otad/otad/internal/testkit/signer"
	"github.com/otad/otad/slots"
	"golang.org/x/sys/unix"
)

// The targets.
const (
	minRatioReadbackOff = 0.9
	minRatioReadbackOn  = 0.8
	maxStreamRSS        = 16 << 20
)

func main() { cli.Tool("installbench", run) }

type options struct {
	otad       string
	size       int64
	rounds     int
	dir        string
	source     string
	slot       string
	inProcess  bool
	cpuProfile string
	keep       bool
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := cli.NewFlagSet("installbench", "-otad BIN [-size 1GiB] [flags]", stderr)
	fs.StringVar(&o.otad, "otad", "", "the otad binary to benchmark (required; `make build` puts it in bin/otad)")
	sizeFlag := fs.String("size", "1GiB", "image size: bytes, or with KiB, MiB, GiB")
	fs.IntVar(&o.rounds, "rounds", 3, "rounds of all phases, interleaved; medians are reported")
	fs.StringVar(&o.dir, "dir", os.TempDir(), "directory for the image, the slots and the baseline's copy (the storage under test)")
	fs.StringVar(&o.source, "source", sourceCached, "the image in the page cache for every phase: cached (read through first) or cold (dropped first)")
	fs.StringVar(&o.slot, "slot", slotFallocate, "slot B before each install: fallocate (fresh allocated blocks each time) or zeros (written once, overwritten)")
	fs.BoolVar(&o.inProcess, "inprocess", false, "also run slots.Write alone in this process (readback off, on) as reference phases")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write CPU profiles of the in-process phases to this directory (implies -inprocess)")
	fs.BoolVar(&o.keep, "keep", false, "keep the work directory")
	if err := cli.ParseNone(fs, args); err != nil {
		return o, err
	}
	var err error
	if o.size, err = parseSize(*sizeFlag); err != nil {
		return o, fmt.Errorf("-size: %w", err)
	}
	switch {
	case o.otad == "":
		return o, errors.New("-otad: required (the binary to benchmark, e.g. bin/otad)")
	case o.rounds < 1:
		return o, fmt.Errorf("-rounds: %d is not positive", o.rounds)
	case o.source != sourceCached && o.source != sourceCold:
		return o, fmt.Errorf("-source: %q is not %s or %s", o.source, sourceCached, sourceCold)
	case o.slot != slotFallocate && o.slot != slotZeros:
		return o, fmt.Errorf("-slot: %q is not %s or %s", o.slot, slotFallocate, slotZeros)
	}
	if o.otad, err = filepath.Abs(o.otad); err != nil {
		return o, fmt.Errorf("-otad: %w", err)
	}
	if st, err := os.Stat(o.otad); err != nil || st.Mode()&0o111 == 0 {
		return o, fmt.Errorf("-otad: %s is not an executable file (run `make build`)", o.otad)
	}
	o.inProcess = o.inProcess || o.cpuProfile != ""
	return o, nil
}

// phase is one thing measured each round.
type phase struct {
	stats *phaseStats
	// install phases write slot B and are checked afterwards.
	install bool
	run     func(ctx context.Context, round int) (sample, error)
}

func run(ctx context.Context, args []string, out, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp(o.dir, "installbench-")
	if err != nil {
		return fmt.Errorf("-dir: %w", err)
	}
	if o.keep {
		fmt.Fprintf(out, "work directory: %s (kept)\n", work)
	} else {
		defer os.RemoveAll(work)
	}

	image := filepath.Join(work, "image.bin")
	t0 := time.Now()
	sum, err := generate(image, o.size)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "image: %.0f MiB, sha256 %s, generated in %v\n", mib(o.size), sum, time.Since(t0).Round(time.Millisecond))

	// The image is served from its directory at full speed, as the demo serves its images.
	srv, err := demo.StartFileServer(work, 0)
	if err != nil {
		return err
	}
	defer srv.Close(context.Background())
	url := srv.URL + "/" + filepath.Base(image)

	rel, err := signer.New()
	if err != nil {
		return err
	}
	dev, err := newTestDevice(work, url, o.size, sum, rel)
	if err != nil {
		return err
	}
	if o.slot == slotZeros {
		if err := zeroSlot(dev.slotB, o.size); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "otad: %s; source %s; slot B %s; dir %s\n", o.otad, o.source, o.slot, work)

	phases := []*phase{
		{stats: &phaseStats{name: "baseline (read+sha256+write)"}, run: func(ctx context.Context, _ int) (sample, error) {
			return baseline(image, filepath.Join(work, "baseline.out"), o.size, sum)
		}},
	}
	for _, readback := range []bool{false, true} {
		phases = append(phases, &phase{
			stats:   &phaseStats{name: "otad install, readback " + onOff(readback), minRatio: minRatio(readback), maxRSS: maxStreamRSS},
			install: true,
			run: func(ctx context.Context, _ int) (sample, error) {
				if err := dev.reset(); err != nil {
					return sample{}, err
				}
				return installOtad(ctx, o.otad, dev.cfg[readback], dev.envelope)
			},
		})
	}
	if o.inProcess {
		for _, readback := range []bool{false, true} {
			name := "slots.Write, readback " + onOff(readback)
			phases = append(phases, &phase{
				stats:   &phaseStats{name: name},
				install: true,
				run: func(ctx context.Context, round int) (sample, error) {
					stop, err := startProfile(o.cpuProfile, fmt.Sprintf("slots-write-readback-%s-r%d", onOff(readback), round+1))
					if err != nil {
						return sample{}, err
					}
					defer stop()
					return writeInProcess(ctx, slots.Job{URL: url, Compression: "none", Size: o.size, SHA256: sum,
						Target: dev.slotB, Booted: dev.slotA, Readback: readback})
				},
			})
		}
	}

	t0 = time.Now()
	chunked, err := chunkedPhases(ctx, o, work, srv, phases[1].stats, rel)
	if err != nil {
		return err
	}
	phases = append(phases, chunked...)
	fmt.Fprintf(out, "chunked payloads and devices ready in %v\n", time.Since(t0).Round(time.Millisecond))

	stats := make([]*phaseStats, len(phases))
	for i, p := range phases {
		stats[i] = p.stats
	}
	// The first phase of a run tends to be slow (the image's writeback just
	// ended, the machine is cold); an uncounted baseline takes that hit, so
	// that it does not land on whichever phase comes first.
	w, err := measure(ctx, o, dev, image, sum, phases[0], 0, srv.Sent)
	if err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	fmt.Fprintf(out, "warm-up (not counted): %s %.1f MiB/s\n", phases[0].stats.name, rate(w, o.size))
	for round := range o.rounds {
		// Rotate the order, so no phase always follows the same one.
		for k := range phases {
			p := phases[(k+round)%len(phases)]
			s, err := measure(ctx, o, dev, image, sum, p, round, srv.Sent)
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", round+1, p.stats.name, err)
			}
			p.stats.samples = append(p.stats.samples, s)
		}
		printRound(out, round, stats, o.size)
	}
	printTable(out, stats, o.size)
	return nil
}

// measure prepares the storage and the source the same way for every phase,
// runs it, and checks what an install left in slot B.
func measure(ctx context.Context, o options, dev *testDevice, image, sum string, p *phase, round int, sent *atomic.Int64) (sample, error) {
	if err := ctx.Err(); err != nil {
		return sample{}, err
	}
	if p.install && o.slot == slotFallocate {
		if err := allocateSlot(dev.slotB, o.size); err != nil {
			return sample{}, err
		}
	}
	if o.source == sourceCold {
		if err := dropCache(image); err != nil {
			return sample{}, err
		}
	} else if err := warmCache(image); err != nil {
		return sample{}, err
	}
	// Nobody else's dirty pages get written back during the phase.
	unix.Sync()
	before := sent.Load()
	s, err := p.run(ctx, round)
	s.fetched = sent.Load() - before
	if err != nil {
		return s, err
	}
	if p.install {
		got, err := fileSHA(dev.slotB, o.size)
		if err != nil {
			return s, err
		}
		if got != sum {
			return s, fmt.Errorf("slot B %s does not hold the image afterwards: sha256 %s, want %s", dev.slotB, got, sum)
		}
	}
	return s, nil
}

// startProfile profiles this process's CPU into dir/name.pprof; without a
// dir it does nothing.
func startProfile(dir, name string) (func(), error) {
	if dir == "" {
		return func() {}, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	f, err := os.Create(filepath.Join(dir, name+".pprof"))
	if err != nil {
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func minRatio(readback bool) float64 {
	if readback {
		return minRatioReadbackOn
	}
	return minRatioReadbackOff
}
