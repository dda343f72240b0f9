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
	"github.com/otad/otad/internal/testkit/signer"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/sim/demo"
	"github.com/otad/otad/slots"
	"golang.org/x/sys/unix"
)

// The targets (issue 33): every install at least 0.9x its ideal (readback
// off: read + decompress + sha256 + O_DIRECT write + fdatasync; on: that and
// an O_DIRECT read of the slot), within 16 MiB.
const (
	minRatioReadbackOff = 0.9
	maxStreamRSS        = 16 << 20
)

func main() { cli.Tool("installbench", run) }

type options struct {
	otad       string
	before     string
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
	fs.StringVar(&o.before, "before", "", "another otad binary (an older build) whose stream installs run in the same rounds, for a before/after comparison")
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
	if o.before != "" {
		if o.before, err = filepath.Abs(o.before); err != nil {
			return o, fmt.Errorf("-before: %w", err)
		}
		if st, err := os.Stat(o.before); err != nil || st.Mode()&0o111 == 0 {
			return o, fmt.Errorf("-before: %s is not an executable file", o.before)
		}
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

	t0 = time.Now()
	kinds, err := makeKinds(image)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "zstd and xz payloads ready in %v\n", time.Since(t0).Round(time.Millisecond))
	phases, ideals, err := streamRows(o, dev, kinds, servedURL(srv.URL))
	if err != nil {
		return err
	}
	if o.inProcess {
		phases = append(phases, inProcessPhases(o, dev, url, sum)...)
	}

	t0 = time.Now()
	chunked, err := chunkedPhases(ctx, o, work, srv, ideals, rel)
	if err != nil {
		return err
	}
	phases = append(phases, chunked...)
	fmt.Fprintf(out, "chunked payloads and devices ready in %v\n", time.Since(t0).Round(time.Millisecond))

	stats, err := rounds(ctx, out, o, dev, image, sum, phases, srv.Sent)
	if err != nil {
		return err
	}
	printTable(out, stats, o.size)
	return nil
}

// inProcessPhases write the raw image with slots.Write in this process,
// read-back off and on: the pipeline without otad's start-up around it.
func inProcessPhases(o options, dev *testDevice, url, sum string) []*phase {
	var phases []*phase
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
				return writeInProcess(ctx, slots.Job{Payload: ota.Payload{URL: url, Compression: "none", Size: o.size, SHA256: sum},
					Target: slots.File(dev.slotB), Booted: slots.File(dev.slotA), Readback: readback})
			},
		})
	}
	return phases
}

// rounds runs an uncounted warm-up, then every phase once a round in a
// rotating order, printing each round's figures.
func rounds(ctx context.Context, out io.Writer, o options, dev *testDevice, image, sum string, phases []*phase, sent *atomic.Int64) ([]*phaseStats, error) {
	stats := make([]*phaseStats, len(phases))
	for i, p := range phases {
		stats[i] = p.stats
	}
	// The first phase of a run tends to be slow (the image's writeback just
	// ended, the machine is cold); an uncounted baseline takes that hit, so
	// that it does not land on whichever phase comes first.
	w, err := measure(ctx, o, dev, image, sum, phases[0], 0, sent)
	if err != nil {
		return nil, fmt.Errorf("warm-up: %w", err)
	}
	fmt.Fprintf(out, "warm-up (not counted): %s %.1f MiB/s\n", phases[0].stats.name, rate(w, o.size))
	for round := range o.rounds {
		// Rotate the order, so no phase always follows the same one.
		for k := range phases {
			p := phases[(k+round)%len(phases)]
			s, err := measure(ctx, o, dev, image, sum, p, round, sent)
			if err != nil {
				return nil, fmt.Errorf("round %d, %s: %w", round+1, p.stats.name, err)
			}
			p.stats.samples = append(p.stats.samples, s)
		}
		printRound(out, round, stats, o.size)
	}
	return stats, nil
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
