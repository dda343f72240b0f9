package operator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
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
	stateTopic, controlTopic := topics.RolloutState(plan.Name), topics.RolloutControl(plan.Name)
	fleet := newFleetSnapshot(fleetview.New(cfg.TopicPrefix), *settle, log)
	var (
		mu       sync.Mutex
		started  bool // after that, the state topic only echoes our own publishes
		retained []byte
	)
	cmds := make(chan rollout.Command, 64)
	// The fleet view asks the group's devices to report within --settle:
	// brokers deliver few (Mosquitto, QoS 1) or no (RabbitMQ) retained
	// statuses to a wildcard subscription.
	sess, err := fleet.fv.Follow(ctx, cfg, fleetview.FollowOptions{
		Window: *settle, Group: plan.Group,
		Extra: map[string]byte{stateTopic: 1, controlTopic: 1},
		Other: func(m mqtt.Message) {
			switch m.Topic {
			case stateTopic:
				mu.Lock()
				if !started {
					retained = m.Payload
				}
				mu.Unlock()
			case controlTopic:
				c, err := decodeCommand(m.Payload)
				if err != nil {
					log.Warn("rollout: ignoring a control message", "topic", m.Topic, "err", err)
					return
				}
				select {
				case cmds <- c:
				default:
					log.Warn("rollout: command queue full; ignoring a command", "id", c.ID, "op", c.Op)
				}
			}
		},
	})
	if err != nil {
		return err
	}
	defer sess.Close()
	if err := sess.Sync(ctx); err != nil {
		return fmt.Errorf("reading the retained state of rollout %s: %w", plan.Name, err)
	}
	mu.Lock()
	started = true
	mu.Unlock()
	s, err := startingState(ctx, sess, plan, stateTopic, retained, stderr)
	if err != nil {
		return err
	}
	live := newLiveTable(stdout)
	live.show(s)
	d := &rollout.Driver{Plan: plan, Topics: topics, Pub: sess, Fleet: fleet.view, Commands: cmds, Tick: *tick, OnState: live.show, Log: log}
	final, err := d.Run(ctx, s)
	live.done(final)
	return err
}

// startingState is the retained state when there is one (refusing a changed
// plan), else a new one, published at once so the plan's hash is on record.
func startingState(ctx context.Context, sess *mqtt.Session, plan *rollout.Plan, topic string, retained []byte, stderr io.Writer) (rollout.State, error) {
	if len(retained) > 0 {
		var s rollout.State
		if err := json.Unmarshal(retained, &s); err != nil {
			return s, fmt.Errorf("retained state of rollout %s on %s: %w", plan.Name, topic, err)
		}
		if s.PlanHash != plan.Hash {
			return s, fmt.Errorf("rollout %s already exists with another plan (hash %.12s, this plan's %.12s): a changed plan needs a new name",
				plan.Name, s.PlanHash, plan.Hash)
		}
		fmt.Fprintf(stderr, "continuing rollout %s from its retained state: %s, wave %d of %d\n", plan.Name, s.Phase, s.Wave, s.WaveCount)
		return s, nil
	}
	s := rollout.NewState(plan, time.Now())
	b, err := json.Marshal(s)
	if err != nil {
		return s, err
	}
	if err := sess.PublishRetained(ctx, b, topic); err != nil {
		return s, err
	}
	fmt.Fprintf(stderr, "started rollout %s: offer %s to group %s in %d waves\n", plan.Name, plan.Offer.ID, plan.Group, len(plan.Waves))
	return s, nil
}

// decodeCommand reads a control message (outside input).
func decodeCommand(b []byte) (rollout.Command, error) {
	var c rollout.Command
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("not a command: %w", err)
	}
	switch {
	case c.ID == "":
		return c, errors.New("command without an id")
	case c.Op != rollout.OpPause && c.Op != rollout.OpResume && c.Op != rollout.OpAbort:
		return c, fmt.Errorf("unknown op %q", c.Op)
	}
	return c, nil
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
	id := make([]byte, 8)
	rand.Read(id)
	c := rollout.Command{ID: hex.EncodeToString(id), Op: op, Reason: *reason, By: os.Getenv("USER"), Time: time.Now().UTC()}
	b, err := json.Marshal(c)
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
