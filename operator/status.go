package operator

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/otad/otad/fleetview"
	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/rollout"
)

// status prints the fleet table (docs/contract/commands.md): the retained statuses, and the
// answers to a report request, which brokers that deliver few or no
// retained messages to a wildcard subscription need (mqtt.ReportRequest).
func status(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fset := newFlagSet("status", "--broker URL [--watch | --json | --summary] [--group G] [--device ID] [--state S] [flags]", stderr)
	bf := addBrokerFlags(fset)
	watch := fset.Bool("watch", false, "keep running and redraw on every message, with progress bars (Ctrl-C ends)")
	asJSON := fset.Bool("json", false, "print one JSON object per device, a line each (docs/contract/commands.md), instead of the table")
	summary := fset.Bool("summary", false, "print only the totals by state, running version, presence, failure code and refusal code")
	window := fset.Duration("window", 3*time.Second, "ask the devices to report within this long (devices take 1s to 5m); 0: retained statuses only")
	queue := fset.Int("broker-queue", rollout.DefaultBrokerQueue, "the messages the broker queues for one client before it drops (Mosquitto's max_queued_messages, EMQX's mqtt.max_mqueue_len; 0: no limit, as RabbitMQ): the view says when answers came faster than it lets through (docs/brokers.md)")
	timeout := fset.Duration("timeout", 0, "without --watch: how long to collect statuses (default: --window plus 1s, longer while answers still arrive)")
	var f fleetview.Filter
	var devices stringList
	fset.StringVar(&f.Group, "group", "", "only the devices whose status lists this group (and ask only them to report)")
	fset.Var(&devices, "device", "only this device (repeatable)")
	fset.StringVar(&f.Refusal, "refused", "", "only devices whose last refused offer gave this code (expired, incompatible, too_big_for_slot, …)")
	fset.StringVar(&f.State, "state", "", "only devices in this state: idle, downloading, verifying, staged, rebooting, confirming, bad (a status that did not decode), none (no status)")
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
	if *window < 0 || *timeout < 0 || *queue < 0 {
		return usagef("--window, --timeout and --broker-queue must not be negative")
	}
	if n := countTrue(*watch, *asJSON, *summary); n > 1 {
		return usagef("--watch, --json and --summary do not go together")
	}
	f.Devices = devices
	if err := f.Check(); err != nil {
		return usagef("--%v", err)
	}
	for _, d := range f.Devices {
		if err := checkName("device", d); err != nil {
			return err
		}
	}
	if f.Group != "" {
		if err := checkName("group", f.Group); err != nil {
			return err
		}
	}
	collect := *timeout
	if collect == 0 {
		collect = *window + time.Second
	}
	v := fleetview.New(cfg.TopicPrefix)
	if *watch {
		return watchFleet(ctx, cfg, v, f, *window, *queue, stdout)
	}
	wctx, cancel := context.WithTimeout(ctx, collect)
	defer cancel()
	var last atomic.Int64 // when the view last changed, UnixNano
	sess, err := v.Follow(wctx, cfg, fleetview.FollowOptions{Window: *window, Group: f.Group, Changed: func() { last.Store(time.Now().UnixNano()) }})
	if err != nil {
		return err
	}
	<-wctx.Done()
	if *timeout == 0 && *window > 0 {
		waitQuiet(ctx, &last, collect)
	}
	sess.Close()
	if err := printFleet(stdout, v, f, *asJSON, *summary); err != nil {
		return err
	}
	if v.Len() == 0 {
		fmt.Fprintf(stderr, "no device status under %s/devices/ within %v\n", cfg.TopicPrefix, collect)
	}
	fmt.Fprintln(stderr, v.Coverage().Say(*queue))
	return nil
}

func countTrue(bs ...bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

// printFleet prints the devices f picks: JSON lines, the totals alone, or
// the table with the totals under it.
func printFleet(w io.Writer, v *fleetview.View, f fleetview.Filter, asJSON, summaryOnly bool) error {
	bw := bufio.NewWriter(w)
	var err error
	switch {
	case asJSON:
		enc := json.NewEncoder(bw)
		enc.SetEscapeHTML(false)
		for _, d := range v.Query(f, 0, 0).Devices {
			if err = enc.Encode(d); err != nil {
				break
			}
		}
	case summaryOnly:
		err = v.Summary(f).Write(bw)
	default:
		if err = v.Render(bw, f, false); err == nil {
			fmt.Fprintln(bw)
			err = v.Summary(f).Write(bw)
		}
	}
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		return fmt.Errorf("write the fleet: %w", err)
	}
	return nil
}

// answersQuiet is how long no answer may arrive before a snapshot ends once
// the answers are due: a loaded broker delivers some late, and a view that
// stopped at the due time would show fewer devices than answered.
const answersQuiet = 500 * time.Millisecond

// waitQuiet returns once the view has not changed for answersQuiet, or after
// at most limit, or when ctx ends.
func waitQuiet(ctx context.Context, last *atomic.Int64, limit time.Duration) {
	for end := time.Now().Add(limit); time.Now().Before(end) && ctx.Err() == nil; time.Sleep(50 * time.Millisecond) {
		if time.Since(time.Unix(0, last.Load())) >= answersQuiet {
			return
		}
	}
}

// waitAnswers waits until the report request's answers are due, then
// while they still arrive (up to window more), or until ctx ends.
func waitAnswers(ctx context.Context, v *fleetview.View, last *atomic.Int64, window time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Until(v.AnswersDue())):
	}
	waitQuiet(ctx, last, window)
	return ctx.Err()
}

// watchFleet redraws the table on every change (at most 10 times a second)
// until ctx ends, with the view's coverage under it.
func watchFleet(ctx context.Context, cfg mqtt.Config, v *fleetview.View, f fleetview.Filter, window time.Duration, queue int, stdout io.Writer) error {
	dirty := make(chan struct{}, 1)
	sess, err := v.Follow(ctx, cfg, fleetview.FollowOptions{Window: window, Group: f.Group, Changed: func() {
		select {
		case dirty <- struct{}{}:
		default:
		}
	}})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer sess.Close()
	tty := ota.IsTerminal(stdout)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-dirty:
		}
		if tty {
			io.WriteString(stdout, "\x1b[H\x1b[2J") // home, clear screen
		} else {
			fmt.Fprintf(stdout, "--- %s\n", time.Now().Format(time.TimeOnly))
		}
		if err := v.Render(stdout, f, true); err != nil {
			return fmt.Errorf("write table: %w", err)
		}
		fmt.Fprintln(stdout)
		v.Summary(f).Write(stdout)
		fmt.Fprintln(stdout, v.Coverage().Say(queue))
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return nil
		}
	}
}
