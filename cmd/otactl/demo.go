package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/otad/otad/agent"
	"github.com/otad/otad/internal/bytesize"
	"github.com/otad/otad/internal/demo"
	"github.com/otad/otad/mqtt"
)

// The demo fleet's fixed parts.
const (
	demoGroup      = "demo"
	demoCompatible = "otad,demo-sim"
	demoSlotSize   = 8 << 20
	// A short commit window: the broken image's health check fails twice
	// (the agent retries every 5 s) and the device rolls back within seconds.
	demoCommitWindow = 6 * time.Second
	demoRefresh      = 300 * time.Millisecond
)

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "health-check" {
		return exitCode(stderr, "demo health-check", demoHealthCheck(args[1:], stdout, stderr))
	}
	return exitCode(stderr, "demo", runDemoFlow(ctx, args, stdout, stderr))
}

// demoHealthCheck is the simulated devices' commit health check (not for
// people): it passes when the booted slot holds a good demo image.
func demoHealthCheck(args []string, stdout, stderr io.Writer) error {
	fset := newFlagSet("demo health-check", "--env FILE --slot-a PATH --slot-b PATH (run by the demo's devices)", stderr)
	env := fset.String("env", "", "the sim bootloader's state file (bootloader.env_file)")
	attempts := fset.Int("attempts", 3, "bootloader.attempts")
	slotA := fset.String("slot-a", "", "slot A's file")
	slotB := fset.String("slot-b", "", "slot B's file")
	pos, err := parseFlags(fset, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 || *env == "" || *slotA == "" || *slotB == "" {
		return usagef("want --env, --slot-a and --slot-b and no arguments")
	}
	slot, err := demo.CheckHealth(demo.HealthArgs{EnvFile: *env, Attempts: *attempts, Slots: map[string]string{"A": *slotA, "B": *slotB}})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "slot %s runs a good image\n", slot)
	return nil
}

type demoOptions struct {
	dir       string
	keep      bool
	devices   int
	timeout   time.Duration
	rate      int64
	imageSize int64
}

// runDemoFlow is `otactl demo` (SPEC §11).
func runDemoFlow(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o demoOptions
	fset := newFlagSet("demo", "[--dir DIR] [--keep] [flags]", stderr)
	fset.StringVar(&o.dir, "dir", "", "work directory (must be empty or absent; kept afterwards) (default: a temporary directory)")
	fset.BoolVar(&o.keep, "keep", false, "keep the temporary work directory (keys, images, device slots, logs)")
	fset.IntVar(&o.devices, "devices", 5, "number of simulated devices (1-20)")
	fset.DurationVar(&o.timeout, "timeout", 90*time.Second, "give up when a step has not converged after this long")
	rate := fset.String("rate", "512KiB", "download speed cap per device, per second (0: none)")
	size := fset.String("image-size", "4MiB", "size of the demo images (at most 8MiB, the slot size)")
	pos, err := parseFlags(fset, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usagef("unexpected arguments %q", pos)
	}
	if o.devices < 1 || o.devices > 20 {
		return usagef("--devices %d: want 1 to 20", o.devices)
	}
	if o.timeout <= 0 {
		return usagef("--timeout %v: want a positive duration", o.timeout)
	}
	if o.rate, err = bytesize.Parse(*rate); err != nil {
		return usagef("--rate: %w", err)
	}
	if o.imageSize, err = bytesize.Parse(*size); err != nil {
		return usagef("--image-size: %w", err)
	}
	if o.imageSize < 64<<10 || o.imageSize > demoSlotSize {
		return usagef("--image-size %s: want 64KiB to 8MiB", *size)
	}
	d := &demoRun{out: stdout, tty: isTerminal(stdout), opt: o, start: time.Now()}
	return d.run(ctx)
}

// demoRun is one run of the demo and what it has set up.
type demoRun struct {
	out   io.Writer
	tty   bool
	opt   demoOptions
	start time.Time

	dir      string
	key      string // the signing key
	broker   *demo.Broker
	files    *demo.FileServer
	www      string
	ids      []string
	devices  []*demo.Device
	tracker  *demo.Tracker
	fleet    *fleet
	watchErr chan error // mqtt.Watch's result

	// non-terminal output: the last state line printed per device
	shown map[string]string
}

// rolloutSpec is one rollout of the demo.
type rolloutSpec struct {
	version string
	secVer  uint64
	broken  bool
	want    demo.Expect
}

func (d *demoRun) say(format string, args ...any) {
	fmt.Fprintf(d.out, format+"\n", args...)
}

func (d *demoRun) run(ctx context.Context) (err error) {
	if err := d.makeDir(); err != nil {
		return err
	}
	defer func() {
		switch {
		case err != nil:
			d.say("\nthe work directory is kept for a look: %s (device logs: devices/*/otad.log)", d.dir)
		case d.opt.dir != "" || d.opt.keep:
			d.say("work directory kept: %s", d.dir)
		default:
			if rerr := os.RemoveAll(d.dir); rerr != nil {
				err = fmt.Errorf("remove the work directory: %w", rerr)
			}
		}
	}()
	d.say("otad demo: %d simulated devices, an embedded MQTT broker and an image server, all on 127.0.0.1", d.opt.devices)
	d.say("work directory %s", d.dir)

	if err := d.makeKey(ctx); err != nil {
		return err
	}
	stop, err := d.startServices()
	if err != nil {
		return err
	}
	defer stop()

	devCtx, stopDevices := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stopDevices(); wg.Wait() }()
	if err := d.startDevices(devCtx, &wg); err != nil {
		return err
	}

	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	d.watch(watchCtx)
	d.say("")
	d.say("waiting for the devices to come up on slot A (the factory image)")
	if err := d.live(ctx, "the devices to come up", func() (bool, error) {
		return len(d.tracker.Ready(d.ids)) == 0, nil
	}); err != nil {
		return err
	}

	rollouts := []rolloutSpec{
		{version: "2.0.0", secVer: 2, want: demo.Expect{Result: agent.ResultSuccess}},
		{version: "2.1.0", secVer: 3, broken: true, want: demo.Expect{Result: agent.ResultFailed, Code: agent.CodeHealthCheckFailed}},
	}
	for i, r := range rollouts {
		d.say("")
		if r.broken {
			d.say("== rollout %d: %s, a BROKEN image: it installs and boots, but fails its health check", i+1, r.version)
		} else {
			d.say("== rollout %d: %s, a good image", i+1, r.version)
		}
		if err := d.rollout(ctx, r); err != nil {
			return err
		}
		if r.broken {
			d.say("every device booted %s, failed the health check within the %v commit window, and rolled back to the previous slot", r.version, demoCommitWindow)
		} else {
			d.say("every device downloaded, wrote, verified, rebooted into and committed %s", r.version)
		}
	}
	d.say("")
	if err := d.summary(rollouts); err != nil {
		return err
	}
	last := rollouts[len(rollouts)-1]
	d.say("\nall %d devices run %s again: %s was rolled back everywhere. Demo finished in %s.",
		len(d.ids), rollouts[0].version, last.version, time.Since(d.start).Round(100*time.Millisecond))
	return nil
}

func (d *demoRun) makeDir() error {
	if d.opt.dir == "" {
		dir, err := os.MkdirTemp("", "otad-demo-")
		if err != nil {
			return fmt.Errorf("work directory: %w", err)
		}
		d.dir = dir
		return nil
	}
	dir, err := filepath.Abs(d.opt.dir)
	if err != nil {
		return fmt.Errorf("--dir %s: %w", d.opt.dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--dir %s: %w", dir, err)
	}
	// Never mix with what is there: the demo writes keys, slots and state.
	if ents, err := os.ReadDir(dir); err != nil {
		return fmt.Errorf("--dir %s: %w", dir, err)
	} else if len(ents) > 0 {
		return usagef("--dir %s: not empty", dir)
	}
	d.dir = dir
	return nil
}

// rel shows a path in the work directory relative to it, for shorter lines.
func (d *demoRun) rel(path string) string {
	if r, err := filepath.Rel(d.dir, path); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return path
}

// cmdline prints what an operator would type, relative to the work directory.
func (d *demoRun) cmdline(args []string) {
	shown := make([]string, len(args))
	for i, a := range args {
		shown[i] = d.rel(a)
	}
	d.say("  $ otactl %s", strings.Join(shown, " "))
}

// indent prints a sub-command's output under its command line.
func (d *demoRun) indent(b []byte) {
	for line := range strings.Lines(string(b)) {
		d.say("    %s", strings.TrimRight(line, "\n"))
	}
}

func (d *demoRun) makeKey(ctx context.Context) error {
	d.say("")
	d.say("making a signing key")
	name := filepath.Join(d.dir, "release")
	args := []string{"keygen", name}
	d.cmdline(args)
	var out, errOut bytes.Buffer
	if err := keygen(ctx, args[1:], &out, &errOut); err != nil {
		return fmt.Errorf("keygen: %w: %s", err, errOut.Bytes())
	}
	d.indent(bytes.ReplaceAll(out.Bytes(), []byte(d.dir+string(filepath.Separator)), nil))
	d.key = name + ".key"
	return nil
}

// startServices starts the broker and the image server; stop ends both.
func (d *demoRun) startServices() (stop func(), err error) {
	logFile, err := os.Create(filepath.Join(d.dir, "broker.log"))
	if err != nil {
		return nil, fmt.Errorf("broker log: %w", err)
	}
	b, err := demo.StartBroker(slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		logFile.Close()
		return nil, err
	}
	d.broker = b
	d.say("embedded MQTT broker on %s (log: broker.log)", b.URL)
	d.www = filepath.Join(d.dir, "www")
	if err := os.Mkdir(d.www, 0o755); err != nil {
		b.Close()
		logFile.Close()
		return nil, fmt.Errorf("image directory: %w", err)
	}
	fs, err := demo.StartFileServer(d.www, d.opt.rate)
	if err != nil {
		b.Close()
		logFile.Close()
		return nil, err
	}
	d.files = fs
	speed := "full speed"
	if d.opt.rate > 0 {
		speed = "at most " + humanRate(float64(d.opt.rate)) + " per download, so progress shows"
	}
	d.say("image server on %s serving www/ (%s)", fs.URL, speed)
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		fs.Close(ctx)
		b.Close()
		logFile.Close()
	}, nil
}

func (d *demoRun) startDevices(ctx context.Context, wg *sync.WaitGroup) error {
	pub, err := os.ReadFile(filepath.Join(d.dir, "release.pub"))
	if err != nil {
		return fmt.Errorf("public key: %w", err)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("the health check runs otactl itself: %w", err)
	}
	for i := 1; i <= d.opt.devices; i++ {
		id := fmt.Sprintf("gw-%02d", i)
		dev, err := demo.NewDevice(demo.DeviceSpec{
			ID: id, Dir: filepath.Join(d.dir, "devices", id), Compatible: demoCompatible,
			Broker: d.broker.URL, Groups: []string{demoGroup}, SlotSize: demoSlotSize,
			Factory:    demo.ImageSpec{Version: "1.0.0", Seed: 1, Size: d.opt.imageSize},
			TrustedKey: pub, CommitWindow: demoCommitWindow, AgentVersion: "demo",
			HealthCommand: func(a demo.HealthArgs) []string {
				return []string{exe, "demo", "health-check", "--env", a.EnvFile, "--attempts", strconv.Itoa(a.Attempts),
					"--slot-a", a.Slots["A"], "--slot-b", a.Slots["B"]}
			},
		})
		if err != nil {
			return err
		}
		d.ids = append(d.ids, id)
		d.devices = append(d.devices, dev)
	}
	d.say("%d devices %s..%s in group %q: slot files of %s, the sim bootloader, their own trust dir and state",
		len(d.ids), d.ids[0], d.ids[len(d.ids)-1], demoGroup, humanSize(demoSlotSize))
	d.say("  each one is a real otad agent (config: devices/ID/otad.toml, log: devices/ID/otad.log); a reboot restarts it")
	for _, dev := range d.devices {
		wg.Go(func() { dev.Run(ctx) })
	}
	return nil
}

// watch follows the status topics as `otactl status --watch` does; live
// reports it if it cannot connect or subscribe.
func (d *demoRun) watch(ctx context.Context) {
	cfg := mqtt.Config{Broker: d.broker.URL}
	d.tracker = demo.NewTracker(mqtt.DefaultTopicPrefix)
	d.fleet = newFleet(mqtt.DefaultTopicPrefix)
	d.watchErr = make(chan error, 1)
	go func() {
		d.watchErr <- mqtt.Watch(ctx, cfg, func(topic string, payload []byte) {
			d.tracker.Observe(topic, payload)
			d.fleet.update(topic, payload)
		})
	}()
}

// rollout builds, signs and publishes one image, then follows the fleet
// until every device has an outcome.
func (d *demoRun) rollout(ctx context.Context, r rolloutSpec) error {
	img := filepath.Join(d.dir, "images", "rootfs-"+r.version+".img")
	if err := os.MkdirAll(filepath.Dir(img), 0o755); err != nil {
		return fmt.Errorf("images: %w", err)
	}
	if err := demo.WriteImageFile(img, demo.ImageSpec{Broken: r.broken, Version: r.version, Seed: r.secVer, Size: d.opt.imageSize}); err != nil {
		return err
	}
	d.say("built %s (%s)", d.rel(img), humanSize(d.opt.imageSize))

	payload := filepath.Join(d.www, filepath.Base(img)+".zst")
	envFile := filepath.Join(d.dir, "rollout-"+r.version+".json")
	id := "demo-" + r.version
	args := []string{"sign", "--key", d.key, "--image", img, "--version", r.version, "--id", id,
		"--compatible", demoCompatible, "--security-version", strconv.FormatUint(r.secVer, 10),
		"--compress", "zstd", "--out-payload", payload, "--url", d.files.URL + "/" + filepath.Base(payload)}
	d.say("signing it; the payload is compressed with zstd")
	d.cmdline(append(args, ">", envFile))
	var env, errOut bytes.Buffer
	if err := sign(ctx, args[1:], &env, &errOut); err != nil {
		return fmt.Errorf("sign %s: %w: %s", r.version, err, errOut.Bytes())
	}
	if err := os.WriteFile(envFile, env.Bytes(), 0o644); err != nil {
		return fmt.Errorf("envelope: %w", err)
	}
	if st, err := os.Stat(payload); err == nil {
		d.say("    payload %s: %s for %s of image, envelope %s: %d bytes",
			d.rel(payload), humanSize(st.Size()), humanSize(d.opt.imageSize), d.rel(envFile), env.Len())
	}

	d.say("publishing rollout %s to group %q", r.version, demoGroup)
	args = []string{"publish", "--broker", d.broker.URL, "--group", demoGroup, envFile}
	d.cmdline(args)
	d.tracker.Begin(id)
	var pubOut bytes.Buffer
	if err := publish(ctx, args[1:], &pubOut, &pubOut); err != nil {
		return fmt.Errorf("publish %s: %w: %s", r.version, err, pubOut.Bytes())
	}
	d.indent(pubOut.Bytes())
	d.say("following the fleet until every device has an outcome (expected: %s)", r.want)
	return d.live(ctx, "rollout "+r.version, func() (bool, error) {
		v := d.tracker.Check(d.ids, r.want)
		if len(v.Wrong) > 0 {
			return false, fmt.Errorf("rollout %s did not go as expected:\n  %s", r.version, strings.Join(v.Wrong, "\n  "))
		}
		return v.Done(), nil
	})
}

// live shows the fleet until done reports true, an error, ctx ends or the
// step's timeout passes. On a terminal the table is redrawn in place; else
// each device's state changes are printed as lines, and the table at the end.
func (d *demoRun) live(ctx context.Context, what string, done func() (bool, error)) error {
	deadline := time.NewTimer(d.opt.timeout)
	defer deadline.Stop()
	tick := time.NewTicker(demoRefresh)
	defer tick.Stop()
	drawn := 0
	for {
		ok, err := done()
		if d.tty || ok || err != nil {
			var buf bytes.Buffer
			// Progress bars while it moves; the settled table without them.
			if rerr := d.fleet.render(&buf, !ok && err == nil); rerr != nil {
				return fmt.Errorf("write table: %w", rerr)
			}
			if drawn > 0 {
				fmt.Fprintf(d.out, "\x1b[%dF\x1b[J", drawn) // up to the table's first line, clear below
			}
			if !d.tty {
				d.changes()
			}
			d.out.Write(buf.Bytes())
			drawn = 0
			if d.tty && !ok && err == nil {
				drawn = bytes.Count(buf.Bytes(), []byte("\n"))
			}
		} else {
			d.changes()
		}
		switch {
		case err != nil:
			return err
		case ok:
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case <-deadline.C:
			return fmt.Errorf("%s: not done within %v (--timeout):\n  %s",
				what, d.opt.timeout, strings.Join(d.tracker.Describe(d.ids), "\n  "))
		case err := <-d.watchErr:
			// Watch returns before its context ends only when it cannot connect or subscribe.
			if err == nil {
				err = errors.New("stopped")
			}
			return fmt.Errorf("watch the fleet on %s: %w", d.broker.URL, err)
		case <-tick.C:
		}
	}
}

// changes prints a line when a device's state changes (non-terminal output).
func (d *demoRun) changes() {
	if d.shown == nil {
		d.shown = map[string]string{}
	}
	for _, id := range d.ids {
		st, ok := d.tracker.Status(id)
		if !ok {
			continue
		}
		line := string(st.State) + " on slot " + st.BootedSlot
		if t := st.Target; t != nil && st.State != agent.Idle {
			line += ", target " + t.Version
		}
		if r := st.LastResult; st.State == agent.Idle && r != nil {
			line += ", last result " + demo.Expect{Result: r.Result, Code: r.Code}.String()
		}
		if d.shown[id] == line {
			continue
		}
		d.shown[id] = line
		d.say("  %6.1fs  %s  %s", time.Since(d.start).Seconds(), id, line)
	}
}

// summary prints the final table: where each device ended and how each rollout went.
func (d *demoRun) summary(rollouts []rolloutSpec) error {
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 4, 2, ' ', 0)
	header := []string{"DEVICE", "BOOTED", "RUNNING"}
	for i, r := range rollouts {
		header = append(header, fmt.Sprintf("ROLLOUT %d (%s)", i+1, r.version), "TOOK")
	}
	header = append(header, "BOOTS")
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for i, id := range d.ids {
		st, _ := d.tracker.Status(id)
		row := []string{id, orDash(st.BootedSlot), orDash(st.Slots[st.BootedSlot].Version)}
		for _, r := range rollouts {
			f, ok := d.tracker.Finished(id, "demo-"+r.version)
			if !ok {
				row = append(row, "-", "-")
				continue
			}
			row = append(row, demo.Expect{Result: f.Result, Code: f.Code}.String(), f.Took.Round(100*time.Millisecond).String())
		}
		row = append(row, strconv.Itoa(d.devices[i].Boots()))
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	d.say("summary")
	if _, err := d.out.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("write summary: %w", err)
	}
	var problems []error
	// The fleet must end on the last image that committed.
	want := ""
	for _, r := range rollouts {
		if r.want.Result == agent.ResultSuccess {
			want = r.version
		}
	}
	for _, id := range d.ids {
		if st, _ := d.tracker.Status(id); st.Slots[st.BootedSlot].Version != want {
			problems = append(problems, fmt.Errorf("%s runs %q on slot %s, want %s", id, st.Slots[st.BootedSlot].Version, st.BootedSlot, want))
		}
	}
	for _, dev := range d.devices {
		if err := dev.Err(); err != nil {
			problems = append(problems, fmt.Errorf("%s: %w", dev.ID, err))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("the fleet did not end as expected: %w", errors.Join(problems...))
	}
	return nil
}

func humanSize(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
