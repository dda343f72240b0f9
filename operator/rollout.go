package operator

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/otad/otad/fleetview"
	"github.com/otad/otad/internal/cli"
	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/rollout"
)

// rolloutUsage lists the rollout subcommands.
const rolloutUsage = `usage: otactl rollout start --broker URL [flags] PLAN
       otactl rollout status --broker URL [--json | --watch] NAME
       otactl rollout pause|resume|abort --broker URL [--reason TEXT] NAME`

// rolloutCmd dispatches the rollout subcommands.
func rolloutCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usagef("want a subcommand\n%s", rolloutUsage)
	}
	switch sub, rest := args[0], args[1:]; sub {
	case "-h", "-help", "--help", "help":
		return cli.HelpError{Usage: rolloutUsage + "\n"}
	case "start":
		return rolloutStart(ctx, rest, stdout, stderr)
	case "status":
		return rolloutStatus(ctx, rest, stdout, stderr)
	case "pause", "resume", "abort":
		return rolloutCommand(ctx, rollout.Op(sub), rest, stdout, stderr)
	default:
		return usagef("unknown subcommand %q\n%s", sub, rolloutUsage)
	}
}

// rolloutStart runs the controller in the foreground (docs/contract/rollouts.md): it goes on
// from the retained state when there is one, and ends when the rollout
// finishes (exit 0), halts or is aborted (exit 1).
func rolloutStart(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("rollout start", "--broker URL [flags] PLAN", stderr)
	bf := addBrokerFlags(fs)
	settle := fs.Duration("settle", 3*time.Second, "ask the group's devices to report within this long, and collect statuses at least this long (and until they stop arriving) before judging anything")
	tick := fs.Duration("tick", time.Second, "how often the controller looks at the fleet")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("want exactly one PLAN file, got %d arguments", len(pos))
	}
	cfg, err := bf.config()
	if err != nil {
		return err
	}
	if *settle <= 0 || *tick <= 0 {
		return usagef("--settle and --tick must be positive")
	}
	plan, err := rollout.LoadPlan(pos[0])
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	topics := mqtt.Topics{Prefix: cfg.TopicPrefix}
	fv := fleetview.New(cfg.TopicPrefix)
	fleet := rollout.NewObserver(fv, *settle, nil)
	fleet.OnReady = func() { log.Info("rollout: fleet view ready", "coverage", fv.Coverage()) }
	inbox := rollout.NewInbox(topics, plan.Name, log)
	// The fleet view asks the group's devices to report within --settle:
	// brokers deliver few (Mosquitto, QoS 1) or no (RabbitMQ) retained
	// statuses to a wildcard subscription.
	sess, err := fv.Follow(ctx, cfg, fleetview.FollowOptions{Window: *settle, Group: plan.Group, Extra: inbox.Topics(), Other: inbox.Receive})
	if err != nil {
		return err
	}
	defer sess.Close()
	if err := sess.Sync(ctx); err != nil {
		return fmt.Errorf("reading the retained state of rollout %s: %w", plan.Name, err)
	}
	live := newLiveTable(stdout)
	d := &rollout.Driver{Plan: plan, Topics: topics, Pub: sess, Fleet: fleet.View, Commands: inbox.Commands(), Tick: *tick, OnState: live.show, Log: log}
	s, resumed, err := d.Start(ctx, inbox.Retained())
	if err != nil {
		return err
	}
	if resumed {
		fmt.Fprintf(stderr, "continuing rollout %s from its retained state: %s, wave %d of %d\n", plan.Name, s.Phase, s.Wave, s.WaveCount)
	} else {
		fmt.Fprintf(stderr, "started rollout %s: offer %s to group %s in %d waves\n", plan.Name, plan.Offer.ID, plan.Group, len(plan.Waves))
	}
	live.show(s)
	final, err := d.Run(ctx, s)
	live.done(final)
	return err
}

// rolloutStatus prints a rollout's retained state, or follows it (--watch).
func rolloutStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("rollout status", "--broker URL [--json | --watch] NAME", stderr)
	bf := addBrokerFlags(fs)
	asJSON := fs.Bool("json", false, "print the retained state as JSON")
	watch := fs.Bool("watch", false, "keep running and redraw on every change (Ctrl-C ends)")
	name, cfg, err := nameAndConfig(fs, bf, args)
	if err != nil {
		return err
	}
	if *asJSON && *watch {
		return usagef("--json and --watch do not go together")
	}
	rs, err := openRollout(ctx, cfg, name)
	if err != nil {
		return err
	}
	defer rs.sess.Close()
	if *asJSON {
		var v any
		if err := json.Unmarshal(rs.raw, &v); err != nil {
			return fmt.Errorf("retained state of rollout %s: %w", name, err)
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	if !*watch {
		return rollout.Render(stdout, rs.state, 10)
	}
	live := newLiveTable(stdout)
	live.show(rs.state)
	for !rs.state.Terminal() {
		select {
		case <-ctx.Done():
			return nil
		case s := <-rs.updates:
			rs.state = s
			live.show(s)
		}
	}
	live.done(rs.state)
	return nil
}

// rolloutCommand publishes an operator command on the control topic
// (retained, so a controller started later sees it) and waits a while for
// the controller to apply it.
func rolloutCommand(ctx context.Context, op rollout.Op, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("rollout "+string(op), "--broker URL [--reason TEXT] NAME", stderr)
	bf := addBrokerFlags(fs)
	reason := fs.String("reason", "", "why, for the state's history")
	wait := fs.Duration("wait", 5*time.Second, "how long to wait for a running controller to apply it")
	name, cfg, err := nameAndConfig(fs, bf, args)
	if err != nil {
		return err
	}
	rs, err := openRollout(ctx, cfg, name)
	if err != nil {
		return err
	}
	defer rs.sess.Close()
	if rs.state.Terminal() {
		return fmt.Errorf("rollout %s is %s: nothing to %s", name, rs.state.Phase, op)
	}
	c := rollout.NewCommand(op, *reason, os.Getenv("USER"), time.Now())
	b, err := c.Encode()
	if err != nil {
		return err
	}
	topic := mqtt.Topics{Prefix: cfg.TopicPrefix}.RolloutControl(name)
	if err := rs.sess.PublishRetained(ctx, b, topic); err != nil {
		return err
	}
	deadline := time.After(*wait)
	for {
		select {
		case s := <-rs.updates:
			if s.LastCommand == c.ID {
				fmt.Fprintf(stdout, "rollout %s: %s\n", name, s.Phase)
				return nil
			}
		case <-deadline:
			fmt.Fprintf(stdout, "published %s on %s; no running controller applied it within %v: "+
				"it is applied when `otactl rollout start PLAN` runs for %s\n", op, topic, *wait, name)
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
