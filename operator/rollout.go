package operator

import (
	"context"
	"crypto"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/otad/otad/internal/cli"
	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/rollout"
)

// rolloutCommands is the rollout subcommand table: `otactl help`, the man
// page and the completions list it (cli.Command.Sub).
func rolloutCommands() map[string]cli.Command {
	op := func(op rollout.Op) func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
			return rolloutCommand(ctx, op, args, stdout, stderr)
		}
	}
	return map[string]cli.Command{
		"start":  {Summary: "run a rollout plan: waves, gates, halts (the controller)", Run: rolloutStart},
		"check":  {Summary: "check a plan offline, or against the fleet with --broker", Run: rolloutCheck},
		"list":   {Summary: "the rollouts the broker retains", Run: rolloutList},
		"status": {Summary: "a rollout's state, or follow it (--watch)", Run: rolloutStatus},
		"pause":  {Summary: "pause a running rollout", Run: op(rollout.OpPause)},
		"resume": {Summary: "resume a paused rollout", Run: op(rollout.OpResume)},
		"abort":  {Summary: "abort a rollout (--withdraw: and clear its retained offers)", Run: op(rollout.OpAbort)},
	}
}

// rolloutStatus prints a rollout's retained state, or follows it (--watch).
func rolloutStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("rollout status", "--broker URL [--json | --watch] NAME", stderr)
	bf := addBrokerFlags(fs)
	of := addOperatorFlags(fs, false)
	asJSON := fs.Bool("json", false, "print the retained state as JSON")
	watch := fs.Bool("watch", false, "keep running and redraw on every change (Ctrl-C ends)")
	name, cfg, err := nameAndConfig(fs, bf, args)
	if err != nil {
		return err
	}
	if *asJSON && *watch {
		return usagef("--json and --watch do not go together")
	}
	trust, _, err := of.load(false)
	if err != nil {
		return err
	}
	rs, err := openRollout(ctx, cfg, trust, name)
	if err != nil {
		return err
	}
	defer rs.sess.Close()
	if *asJSON {
		payload, _, err := trust.Open("state", mqtt.Topics{Prefix: cfg.TopicPrefix}.RolloutState(name), rs.raw)
		if err != nil {
			return err
		}
		var v any
		if err := json.Unmarshal(payload, &v); err != nil {
			return fmt.Errorf("retained state of rollout %s: %w", name, err)
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	if !*watch {
		return rollout.Render(ctx, stdout, rs.state, 10, time.Now())
	}
	live := newLiveTable(ctx, stdout)
	live.show(rs.state)
	told := "" // the lease whose end was told: once, until another holds the rollout
	for !rs.state.Terminal() {
		// A controller that stopped publishes nothing more: say so once,
		// when its lease ends (docs/contract/rollouts.md, one lease).
		var expiry <-chan time.Time
		if l := rs.state.Lease; l != nil {
			if msg := rollout.Unrun(rs.state, time.Now()); msg != "" {
				if lease := fmt.Sprintf("%d %s", l.Epoch, l.Holder); lease != told {
					told = lease
					live.unrun(rs.state, msg)
				}
			} else if l.Released.IsZero() {
				expiry = time.After(time.Until(l.Expires()) + 10*time.Millisecond)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case s := <-rs.updates:
			rs.state = s
			live.show(s)
		case <-expiry:
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
	of := addOperatorFlags(fs, true)
	reason := fs.String("reason", "", "why, for the state's history")
	wait := fs.Duration("wait", 5*time.Second, "how long to wait for a running controller to apply it")
	var withdrawOffers bool
	window := 3 * time.Second
	if op == rollout.OpAbort {
		fs.BoolVar(&withdrawOffers, "withdraw", false, "then clear the rollout's offers retained on its devices' desired topics (also for a rollout aborted or finished already)")
		fs.DurationVar(&window, "window", window, "with --withdraw: ask the group's devices to report within this long, to find them")
	}
	name, cfg, err := nameAndConfig(fs, bf, args)
	if err != nil {
		return err
	}
	trust, key, err := of.load(true)
	if err != nil {
		return err
	}
	rs, err := openRollout(ctx, cfg, trust, name)
	if err != nil {
		return err
	}
	defer rs.sess.Close()
	if rs.state.Terminal() {
		if withdrawOffers {
			return withdraw(ctx, cfg, rs.state, window, stdout)
		}
		return fmt.Errorf("rollout %s is %s: nothing to %s", name, rs.state.Phase, op)
	}
	c := rollout.NewCommand(op, *reason, os.Getenv("USER"), time.Now())
	topic, err := publishCommand(ctx, cfg, rs.sess, key, name, c)
	if err != nil {
		return err
	}
	if err := awaitCommand(ctx, rs, c, *wait, topic, stdout); err != nil || !withdrawOffers {
		return err
	}
	return withdraw(ctx, cfg, rs.state, window, stdout)
}

// publishCommand publishes c on rollout name's control topic (retained,
// on every broker node) through sess, signed with the operator key (its
// time the counter: docs/contract/rollouts.md), and returns the topic:
// what `otactl rollout pause/resume/abort` and the dashboard's buttons do.
func publishCommand(ctx context.Context, cfg mqtt.Config, sess *mqtt.Session, key crypto.Signer, name string, c rollout.Command) (string, error) {
	b, err := c.Encode()
	if err != nil {
		return "", err
	}
	topic := mqtt.Topics{Prefix: cfg.TopicPrefix}.RolloutControl(name)
	if b, err = rollout.Seal(key, topic, uint64(c.Time.UnixMilli()), b); err != nil {
		return "", err
	}
	return topic, publishEverywhere(ctx, cfg, sess, b, topic)
}

// awaitCommand waits up to wait for a running controller to apply c.
func awaitCommand(ctx context.Context, rs *rolloutSession, c rollout.Command, wait time.Duration, topic string, stdout io.Writer) error {
	deadline := time.After(wait)
	for {
		select {
		case s := <-rs.updates:
			rs.state = s
			if s.LastCommand == c.ID {
				fmt.Fprintf(stdout, "rollout %s: %s\n", s.Name, s.Phase)
				return nil
			}
		case <-deadline:
			fmt.Fprintf(stdout, "published %s on %s; no running controller applied it within %v: "+
				"it is applied when `otactl rollout start PLAN` runs for %s\n", c.Op, topic, wait, rs.state.Name)
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
