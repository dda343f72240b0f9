package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/otad/otad/device/node"
	"github.com/otad/otad/internal/cli"
	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/sim/fleet"
)

func main() { cli.Tool("fleetbench", run) }

type options struct {
	latency latencyOptions // the one-device run; n 0 skips it
	agents  []int          // fleet sizes, growing; none skips the fleet runs
	fleet   fleetOptions
	dir     string // work directory; "" makes a temporary one
	cpuProf string // write a CPU profile of the fleet runs here
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := cli.NewFlagSet("fleetbench", "[-latency-n N] [-agents N,N] [flags]", stderr)
	fs.IntVar(&o.latency.n, "latency-n", 200, "offers timed in the latency run (0: skip it)")
	fs.DurationVar(&o.latency.gap, "latency-gap", 100*time.Millisecond, "pause after each downloading event, so the next offer interrupts a transfer in flight")
	rate := fs.String("latency-rate", "64KiB", "the latency run's image server pace per response, per second")
	agents := fs.String("agents", "1000,5000,10000", "fleet sizes, growing (empty: skip the fleet runs)")
	size := fs.String("image-size", "1MiB", "image size (the latency run's slots are 1 MiB larger, sparse)")
	fs.IntVar(&o.fleet.maxInstalls, "max-installs", fleet.DefaultMaxInstalls, "installs at once in a fleet, at most")
	fs.DurationVar(&o.fleet.timeout, "timeout", 3*time.Minute, "a fleet size fails when its devices have not come up, or not converged, in this long")
	fs.StringVar(&o.dir, "dir", "", "work directory (default: a new temporary directory, removed afterwards)")
	fs.StringVar(&o.cpuProf, "cpuprofile", "", "write a CPU profile of the fleet runs to this file (go tool pprof)")
	fs.BoolVar(&o.fleet.nodelay, "tcp-nodelay", false, "set set_tcp_nodelay in mosquitto.conf (default off, as mosquitto ships)")
	if err := cli.ParseNone(fs, args); err != nil {
		return o, err
	}
	var err error
	if o.latency.imageSize, err = cli.ParseBytes(*size); err != nil {
		return o, fmt.Errorf("-image-size: %w", err)
	}
	if o.latency.imageSize < 64<<10 || o.latency.imageSize > 1<<30 {
		return o, fmt.Errorf("-image-size %s: want 64KiB to 1GiB", *size)
	}
	o.fleet.imageSize = o.latency.imageSize
	if o.latency.rate, err = cli.ParseBytes(*rate); err != nil || o.latency.rate == 0 {
		return o, fmt.Errorf("-latency-rate %s: want a positive byte count per second", *rate)
	}
	if o.latency.n < 0 {
		return o, fmt.Errorf("-latency-n %d: want 0 or more", o.latency.n)
	}
	if o.agents, err = parseAgents(*agents); err != nil {
		return o, fmt.Errorf("-agents: %w", err)
	}
	if o.fleet.timeout <= 0 {
		return o, fmt.Errorf("-timeout %v: want a positive duration", o.fleet.timeout)
	}
	o.latency.nodelay = o.fleet.nodelay
	return o, nil
}

func run(ctx context.Context, args []string, out, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	dir := o.dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "fleetbench-"); err != nil {
			return fmt.Errorf("work directory: %w", err)
		}
		defer os.RemoveAll(dir)
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("-dir %s: %w", dir, err)
	}
	progress := func(s string) { fmt.Fprintf(stderr, "%s %s\n", time.Now().Format("15:04:05"), s) }

	// Our soft limit is raised before mosquitto starts: it inherits it.
	was, nofile, err := fleet.RaiseNoFile()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "fleetbench: %s, %d CPUs, %s, mosquitto %s\n", runtime.Version(), runtime.NumCPU(), runtime.GOARCH, mosquittoVersion())
	fmt.Fprintf(out, "load average at start: %s\n", loadAvg())
	fmt.Fprintf(out, "RLIMIT_NOFILE soft limit set from %d to %d (the hard limit) in-process (Go raises it at start, for itself only); mosquitto inherits it\n", was, nofile)
	fmt.Fprintf(out, "image %s per offer; fleet installs at once: at most %d; work directory %s\n\n", mib(o.latency.imageSize), o.fleet.maxInstalls, dir)

	if o.latency.n > 0 {
		progress(fmt.Sprintf("latency: %d offers, image server paced at %d B/s", o.latency.n, o.latency.rate))
		ldir := filepath.Join(dir, "latency")
		if err := os.MkdirAll(ldir, 0o755); err != nil {
			return fmt.Errorf("latency directory: %w", err)
		}
		res, err := runLatency(ctx, ldir, o.latency, progress)
		if err != nil {
			return fmt.Errorf("latency: %w", err)
		}
		printLatency(out, res, o.latency)
	}

	downloadsOK := true
	if len(o.agents) > 0 {
		if o.cpuProf != "" {
			stop, err := startCPUProfile(o.cpuProf)
			if err != nil {
				return err
			}
			defer stop()
		}
		var results []fleetResult
		for _, n := range o.agents {
			progress(fmt.Sprintf("fleet %d: laying out devices", n))
			r := runFleet(ctx, filepath.Join(dir, fmt.Sprintf("fleet-%d", n)), n, o.fleet, progress)
			results = append(results, r)
			if r.Err != nil {
				progress(fmt.Sprintf("fleet %d: %v", n, r.Err))
				break
			}
			progress(fmt.Sprintf("fleet %d: converged in %v", n, r.Converge.Round(time.Millisecond)))
			if ctx.Err() != nil {
				break
			}
		}
		downloadsOK = printFleet(out, results, o.fleet.timeout)
	}
	fmt.Fprintf(out, "\nload average at end: %s\n", loadAvg())
	if !downloadsOK {
		return errors.New("fleet: a device did not download the image exactly once (issue 11: one offer per device); see the rows marked FAIL")
	}
	return ctx.Err()
}

func printLatency(out io.Writer, r latencyResult, o latencyOptions) {
	s := r.Summary
	fmt.Fprintf(out, "Offer → downloading latency, one device, loopback mosquitto (%d superseding offers, %v apart; the first offer, from idle, took %s ms and is not counted)\n",
		s.N, o.gap, ms(r.First))
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "n\tmin ms\tmedian ms\tp90 ms\tp99 ms\tmax ms\tmean ms\t")
	fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t\n", s.N, ms(s.Min), ms(s.P50), ms(s.P90), ms(s.P99), ms(s.Max), ms(s.Mean))
	tw.Flush()
	fmt.Fprintf(out, "These include the agent's %v gathering of network offers before it takes the newest (OfferSettle, set in device/node);\n", agentOfferSettle)
	fmt.Fprintf(out, "beyond that window: median %s ms, p99 %s ms.\n\n", ms(s.P50-agentOfferSettle), ms(s.P99-agentOfferSettle))
}

// agentOfferSettle is the agent's gathering window for network offers.
const agentOfferSettle = node.OfferSettle

// downloadsOK says whether every device downloaded the image exactly once:
// one group offer is one offer per device (issue 11), so one download. A
// size that did not converge can only be held to no device downloading twice.
func (r fleetResult) downloadsOK() bool {
	if r.Err != nil {
		return r.Downloads[1] <= 1
	}
	return r.Downloads == [2]int{1, 1}
}

// printFleet prints the fleet table; it returns false when a row's
// downloads per device were not exactly 1 (those rows say FAIL).
func printFleet(out io.Writer, rs []fleetResult, timeout time.Duration) bool {
	fmt.Fprintln(out, "Group offer to N in-memory agents in one process (otasim fleet), one stock mosquitto (converge: publish → last device's success)")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "N\tresult\tup\tconverge\tdevice p50\tdevice p99\tdownloads/device\tself RSS idle\tself peak RSS\tmosquitto peak RSS\tgoroutines idle\tgoroutines peak\tFDs\t")
	largest, ok := 0, true
	for _, r := range rs {
		res, converge := "ok", r.Converge.Round(time.Millisecond).String()
		if r.Err != nil {
			res, converge = fmt.Sprintf("FAILED %d/%d", r.Succeeded, r.N), "-"
		} else {
			largest = r.N
		}
		if !r.downloadsOK() {
			res, ok = "FAIL", false
		}
		dl := r.downloadRange()
		p := r.Peaks
		fmt.Fprintf(tw, "%d\t%s\t%v\t%s\t%v\t%v\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t\n", r.N, res,
			r.Up.Round(time.Millisecond), converge, r.PerDevice.P50.Round(time.Millisecond), r.PerDevice.P99.Round(time.Millisecond),
			dl, mib(r.IdleRSS), mib(p.SelfHWM), mib(p.BrokerHWM), r.IdleGor, p.Goroutines, p.FDs)
	}
	tw.Flush()
	for _, r := range rs {
		if r.Err != nil {
			fmt.Fprintf(out, "N=%d failed (%d/%d succeeded): %v\n", r.N, r.Succeeded, r.N, r.Err)
		}
		if !r.downloadsOK() {
			fmt.Fprintf(out, "N=%d FAIL: downloads per device %s, want exactly 1 (one offer per device, issue 11)\n", r.N, r.downloadRange())
		}
	}
	if largest > 0 {
		fmt.Fprintf(out, "largest N converged within %v: %d\n", timeout, largest)
	} else {
		fmt.Fprintf(out, "no fleet size converged within %v\n", timeout)
	}
	return ok
}

// downloadRange is the fewest and most downloads by one device: "1", "0-2".
func (r fleetResult) downloadRange() string {
	if r.Downloads[1] != r.Downloads[0] {
		return fmt.Sprintf("%d-%d", r.Downloads[0], r.Downloads[1])
	}
	return fmt.Sprint(r.Downloads[0])
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func mosquittoVersion() string {
	bin, err := mosquittotest.Binary()
	if err != nil {
		return "not found"
	}
	b, _ := exec.Command(bin, "-h").CombinedOutput() // exits 3 after printing its usage
	first, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimPrefix(strings.TrimSpace(first), "mosquitto version ")
}

func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
