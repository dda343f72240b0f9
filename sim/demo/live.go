package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/otad/otad/fleetview"
	"github.com/otad/otad/ota"
)

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
			if rerr := d.fleet.Render(&buf, fleetview.Filter{}, !ok && err == nil); rerr != nil {
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
