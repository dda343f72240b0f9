package otactl

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/otad/otad/fleetview"
	"github.com/otad/otad/mqtt"
)

// status prints the fleet table from the retained status topics (SPEC §9).
func status(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fset := newFlagSet("status", "--broker URL [--watch] [flags]", stderr)
	bf := addBrokerFlags(fset)
	watch := fset.Bool("watch", false, "keep running and redraw on every message, with progress bars (Ctrl-C ends)")
	timeout := fset.Duration("timeout", 2*time.Second, "without --watch: how long to collect the retained status messages")
	pos, err := parseFlags(fset, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usagef("unexpected arguments %q", pos)
	}
	cfg, err := bf.config()
	if err != nil {
		return err
	}
	if *timeout <= 0 {
		return usagef("--timeout %v: want a positive duration", *timeout)
	}
	f := fleetview.New(cfg.TopicPrefix)
	if !*watch {
		// Retained messages arrive right after the subscription; collect them for a while.
		wctx, cancel := context.WithTimeout(ctx, *timeout)
		defer cancel()
		if err := f.Watch(wctx, cfg, nil); err != nil {
			return err
		}
		if err := f.Render(stdout, false); err != nil {
			return fmt.Errorf("write table: %w", err)
		}
		if f.Len() == 0 {
			fmt.Fprintf(stderr, "no device status under %s/devices/ within %v\n", cfg.TopicPrefix, *timeout)
		}
		return nil
	}
	return watchFleet(ctx, cfg, f, stdout)
}

// watchFleet redraws the table on every change (at most 10 times a second) until ctx ends.
func watchFleet(ctx context.Context, cfg mqtt.Config, f *fleetview.View, stdout io.Writer) error {
	dirty := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		done <- f.Watch(ctx, cfg, func() {
			select {
			case dirty <- struct{}{}:
			default:
			}
		})
	}()
	tty := fleetview.IsTerminal(stdout)
	for {
		select {
		case err := <-done:
			return err
		case <-dirty:
		}
		if tty {
			io.WriteString(stdout, "\x1b[H\x1b[2J") // home, clear screen
		} else {
			fmt.Fprintf(stdout, "--- %s\n", time.Now().Format(time.TimeOnly))
		}
		if err := f.Render(stdout, true); err != nil {
			return fmt.Errorf("write table: %w", err)
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case err := <-done:
			return err
		}
	}
}
