package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/otad/otad/fleetview"

	"github.com/otad/otad/ota"
)

// rollout builds, signs and publishes one image, then follows the fleet
// until every device has an outcome.
func (d *run) rollout(ctx context.Context, r rolloutSpec) error {
	img := filepath.Join(d.dir, "images", "rootfs-"+r.version+".img")
	if err := os.MkdirAll(filepath.Dir(img), 0o755); err != nil {
		return fmt.Errorf("images: %w", err)
	}
	if err := WriteImageFile(img, ImageSpec{Broken: r.broken, Version: r.version, Seed: r.secVer, Size: d.opt.ImageSize}); err != nil {
		return err
	}
	d.say("built %s (%s)", d.rel(img), humanSize(d.opt.ImageSize))

	payload := filepath.Join(d.www, filepath.Base(img)+".zst")
	envFile := filepath.Join(d.dir, "rollout-"+r.version+".json")
	id := "demo-" + r.version
	args := []string{"sign", "--key", d.key, "--image", img, "--version", r.version, "--id", id,
		"--compatible", compatible, "--security-version", strconv.FormatUint(r.secVer, 10),
		"--compress", "zstd", "--out-payload", payload, "--url", d.files.URL + "/" + filepath.Base(payload)}
	d.say("signing it; the payload is compressed with zstd")
	env, _, err := d.otactl(ctx, args, envFile)
	if err != nil {
		return err
	}
	if err := os.WriteFile(envFile, env, 0o644); err != nil {
		return fmt.Errorf("envelope: %w", err)
	}
	if st, err := os.Stat(payload); err == nil {
		d.say("    payload %s: %s for %s of image, envelope %s: %d bytes",
			d.rel(payload), humanSize(st.Size()), humanSize(d.opt.ImageSize), d.rel(envFile), len(env))
	}

	d.say("publishing rollout %s to group %q", r.version, group)
	args = []string{"publish", "--broker", d.broker.URL, "--group", group, envFile}
	d.fleet.Begin(id)
	out, errOut, err := d.otactl(ctx, args, "")
	if err != nil {
		return err
	}
	d.indent(append(out, errOut...))
	d.say("following the fleet until every device has an outcome (expected: %s)", fleetview.Brief(r.want))
	return d.live(ctx, "rollout "+r.version, func() (bool, error) {
		v := d.fleet.Check(d.ids, r.want)
		if len(v.Wrong) > 0 {
			return false, fmt.Errorf("rollout %s did not go as expected:\n  %s", r.version, strings.Join(v.Wrong, "\n  "))
		}
		return v.Done(), nil
	})
}

// live shows the fleet until done reports true, an error, ctx ends or the
// step's timeout passes. On a terminal the table is redrawn in place; else
// each device's state changes are printed as lines, and the table at the end.
func (d *run) live(ctx context.Context, what string, done func() (bool, error)) error {
	deadline := time.NewTimer(d.opt.Timeout)
	defer deadline.Stop()
	tick := time.NewTicker(refresh)
	defer tick.Stop()
	drawn := 0
	for {
		ok, err := done()
		if d.tty || ok || err != nil {
			var buf bytes.Buffer
			// Progress bars while it moves; the settled table without them.
			if rerr := d.fleet.Render(&buf, !ok && err == nil); rerr != nil {
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
				what, d.opt.Timeout, strings.Join(d.fleet.Describe(d.ids), "\n  "))
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
func (d *run) changes() {
	if d.shown == nil {
		d.shown = map[string]string{}
	}
	for _, id := range d.ids {
		st, ok := d.fleet.Status(id)
		if !ok {
			continue
		}
		line := string(st.State) + " on slot " + string(st.BootedSlot)
		if t := st.Target; t != nil && st.State != ota.Idle {
			line += ", target " + t.Version
		}
		if r := st.LastResult; st.State == ota.Idle && r != nil {
			line += ", last result " + fleetview.Brief(*r)
		}
		if d.shown[id] == line {
			continue
		}
		d.shown[id] = line
		d.say("  %6.1fs  %s  %s", time.Since(d.start).Seconds(), id, line)
	}
}
