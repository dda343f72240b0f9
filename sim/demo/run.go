package demo

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/otad/otad/fleetview"
	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/operator"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/rollout"
	"github.com/otad/otad/sim/device"
)

// run is one run of the demo and what it has set up.
type run struct {
	out   io.Writer
	tty   bool
	opt   Options
	start time.Time

	dir      string
	key      string // the signing key
	broker   *Broker
	files    *FileServer
	www      string
	ids      []string
	devices  []*device.Device
	fleet    *fleetview.View
	watchErr chan error // the fleet watch's result
	dashURL  string     // the dashboard's page

	// non-terminal output: the last state line printed per device
	shown map[string]string
}

// rolloutSpec is one rollout of the demo.
type rolloutSpec struct {
	version string
	secVer  uint64
	broken  bool
	want    rollout.Outcome
	// from is the version whose image this one changes in a few chunks; it
	// goes out as a chunked payload (docs/contract/chunked.md), so devices fetch only those.
	from string
	// canary, when set, releases it through `otactl rollout`: this device
	// first, then the rest of the group, unless the canary fails.
	canary string
}

// Run runs the demo (docs/operating.md), telling out what happens; it returns nil
// when every device ended as expected.
func Run(ctx context.Context, o Options, out io.Writer) error {
	if err := o.Check(); err != nil {
		return err
	}
	d := &run{out: out, tty: ota.IsTerminal(out), opt: o, start: time.Now()}
	return d.run(ctx)
}

func (d *run) say(format string, args ...any) {
	fmt.Fprintf(d.out, format+"\n", args...)
}

func (d *run) run(ctx context.Context) (err error) {
	if d.dir, err = d.opt.makeDir(); err != nil {
		return err
	}
	defer func() {
		switch {
		case err != nil:
			d.say("\nthe work directory is kept for a look: %s (device logs: devices/*/otad.log)", d.dir)
		case d.opt.Dir != "" || d.opt.Keep:
			d.say("work directory kept: %s", d.dir)
		default:
			if rerr := os.RemoveAll(d.dir); rerr != nil {
				err = fmt.Errorf("remove the work directory: %w", rerr)
			}
		}
	}()
	d.say("otad demo: %d simulated devices, an embedded MQTT broker and an image server, all on 127.0.0.1", d.opt.Devices)
	d.say("work directory %s", d.dir)

	if err := d.makeKey(ctx); err != nil {
		return err
	}
	stop, err := d.startServices()
	if err != nil {
		return err
	}
	defer stop()
	stopDash, err := d.startDashboard(ctx)
	if err != nil {
		return err
	}
	defer stopDash()

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
		return len(d.fleet.Ready(d.ids)) == 0, nil
	}); err != nil {
		return err
	}

	rollouts := demoRollouts()
	if err := d.rollouts(ctx, rollouts); err != nil {
		return err
	}
	d.say("")
	if err := d.summary(rollouts); err != nil {
		return err
	}
	last := rollouts[len(rollouts)-1]
	d.say("\nall %d devices run %s: %s went no further than its canary, which rolled back. Demo finished in %s.",
		len(d.ids), rollouts[0].version, last.version, time.Since(d.start).Round(100*time.Millisecond))
	if d.opt.Keep {
		d.keepUp(ctx)
		return nil
	}
	d.say("the dashboard, the broker and the devices stop now; to keep them up for a look: make demo DEMO_FLAGS=--keep (otasim demo --keep)")
	return nil
}

// demoRollouts: a good image for every device, then a broken one its
// canary catches.
func demoRollouts() []rolloutSpec {
	return []rolloutSpec{
		{version: "2.0.0", secVer: 2, want: rollout.Outcome{Result: ota.ResultSuccess}},
		{version: "2.1.0", secVer: 3, broken: true, from: "2.0.0", canary: "gw-01", want: rollout.Outcome{Result: ota.ResultFailed, Code: ota.CodeHealthCheckFailed}},
	}
}

// rollouts runs each rollout in turn and says what came of it.
func (d *run) rollouts(ctx context.Context, rollouts []rolloutSpec) error {
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
		switch {
		case r.broken && r.canary != "":
			d.say("the canary %s booted %s, failed the health check within the %v commit window and rolled back; the rollout halted, so no other device was offered %s", r.canary, r.version, commitWindow, r.version)
		case r.broken:
			d.say("every device booted %s, failed the health check within the %v commit window, and rolled back to the previous slot", r.version, commitWindow)
		default:
			d.say("every device downloaded, wrote, verified, rebooted into and committed %s", r.version)
		}
	}
	return nil
}

// rel shows a path in the work directory relative to it, for shorter lines.
func (d *run) rel(path string) string {
	if r, err := filepath.Rel(d.dir, path); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return path
}

// otactl runs an operator command as a person would type it, through
// otactl's own entry point: the command line is shown relative to the work
// directory, with "> redirect" when its output goes to a file.
func (d *run) otactl(ctx context.Context, args []string, redirect string) (stdout, stderr []byte, err error) {
	shown := make([]string, len(args))
	for i, a := range args {
		shown[i] = d.rel(a)
	}
	if redirect != "" {
		shown = append(shown, ">", d.rel(redirect))
	}
	d.say("  $ otactl %s", strings.Join(shown, " "))
	var out, errOut bytes.Buffer
	if code := operator.Run(ctx, args, &out, &errOut); code != 0 {
		return nil, nil, fmt.Errorf("otactl %s: exit %d: %s", args[0], code, bytes.TrimSpace(errOut.Bytes()))
	}
	return out.Bytes(), errOut.Bytes(), nil
}

// indent prints a command's output under its command line.
func (d *run) indent(b []byte) {
	for line := range strings.Lines(string(b)) {
		d.say("    %s", strings.TrimRight(line, "\n"))
	}
}

func (d *run) makeKey(ctx context.Context) error {
	d.say("")
	d.say("making a signing key")
	name := filepath.Join(d.dir, "release")
	out, _, err := d.otactl(ctx, []string{"keygen", name}, "")
	if err != nil {
		return err
	}
	d.indent(bytes.ReplaceAll(out, []byte(d.dir+string(filepath.Separator)), nil))
	d.key = name + ".key"
	return nil
}

// startServices starts the broker and the image server; stop ends both.
func (d *run) startServices() (stop func(), err error) {
	logFile, err := os.Create(filepath.Join(d.dir, "broker.log"))
	if err != nil {
		return nil, fmt.Errorf("broker log: %w", err)
	}
	b, err := StartBroker(slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelWarn})))
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
	fs, err := StartFileServer(d.www, d.opt.Rate)
	if err != nil {
		b.Close()
		logFile.Close()
		return nil, err
	}
	d.files = fs
	speed := "full speed"
	if d.opt.Rate > 0 {
		speed = "at most " + ota.HumanRate(float64(d.opt.Rate)) + " per download, so progress shows"
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

func (d *run) startDevices(ctx context.Context, wg *sync.WaitGroup) error {
	pub, err := os.ReadFile(filepath.Join(d.dir, "release.pub"))
	if err != nil {
		return fmt.Errorf("public key: %w", err)
	}
	var factory bytes.Buffer
	if err := WriteImage(&factory, ImageSpec{Version: "1.0.0", Seed: 1, Size: d.opt.ImageSize}); err != nil {
		return err
	}
	for i := 1; i <= d.opt.Devices; i++ {
		id := fmt.Sprintf("gw-%02d", i)
		dev, err := device.New(device.Spec{
			ID: id, Dir: filepath.Join(d.dir, "devices", id), Compatible: compatible,
			Broker: d.broker.URL, Groups: []string{group}, SlotSize: SlotSize,
			Factory: bytes.NewReader(factory.Bytes()), TrustedKey: pub, CommitWindow: commitWindow,
			HealthCommand: func(p device.Paths) []string {
				return d.opt.HealthCommand(HealthArgs{EnvFile: p.EnvFile, Attempts: device.Attempts,
					Slots: map[string]string{"A": p.SlotA, "B": p.SlotB}})
			},
		}, "demo")
		if err != nil {
			return err
		}
		d.ids = append(d.ids, id)
		d.devices = append(d.devices, dev)
	}
	d.say("%d devices %s..%s in group %q: slot files of %s, the sim bootloader, their own trust dir and state",
		len(d.ids), d.ids[0], d.ids[len(d.ids)-1], group, humanSize(SlotSize))
	d.say("  each one is a real otad agent (config: devices/ID/otad.toml, log: devices/ID/otad.log); a reboot restarts it")
	for _, dev := range d.devices {
		wg.Go(func() { dev.Run(ctx) })
	}
	return nil
}

// watch follows the device topics as `otactl status --watch` does; live
// reports it if it cannot connect or subscribe.
func (d *run) watch(ctx context.Context) {
	d.fleet = fleetview.New(mqtt.DefaultTopicPrefix)
	d.watchErr = make(chan error, 1)
	go func() { d.watchErr <- d.fleet.Watch(ctx, mqtt.Config{Broker: d.broker.URL}, nil) }()
}
