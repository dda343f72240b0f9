package operator

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"time"

	"github.com/otad/otad/rollout"
	"github.com/otad/otad/rollout/controller"
)

// rolloutStart runs the controller in the foreground (rollout/controller,
// docs/contract/rollouts.md): it goes on from the retained state when
// there is one, and ends when the rollout finishes (exit 0), halts or is
// aborted (exit 1), or another controller holds or takes its lease (exit 4).
func rolloutStart(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("rollout start", "--broker URL [flags] PLAN", stderr)
	bf := addBrokerFlags(fs)
	of := addOperatorFlags(fs, true)
	of.addStateDir()
	settle := fs.Duration("settle", 3*time.Second, "ask the group's devices to report within this long, and collect statuses at least this long (and until they stop arriving) before judging anything")
	tick := fs.Duration("tick", time.Second, "how often the controller looks at the fleet")
	lease := fs.Duration("lease", rollout.DefaultLease, "the controller's lease: renewed every third of it; another controller may take over a lease unrenewed this long")
	takeOver := fs.Bool("take-over", false, "wait out a lease another controller holds (at most its TTL) and take the rollout over unless it is renewed meanwhile; without it such a lease is refused at once (exit 4), unless its holder is proven gone (same host and boot, process not running): that one is taken at once")
	queue := fs.Int("broker-queue", rollout.DefaultBrokerQueue, "the messages the broker queues for one client before it drops (Mosquitto's max_queued_messages, EMQX's mqtt.max_mqueue_len; 0: no limit, as RabbitMQ): a plan that would draw more answers at once to the controller is refused before anything is offered (docs/brokers.md)")
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
	if *settle <= 0 || *tick <= 0 || *lease < 3*time.Second || *lease > rollout.MaxLeaseTTL || *queue < 0 {
		return usagef("--settle and --tick must be positive, --lease from 3s to %v, --broker-queue 0 or more", rollout.MaxLeaseTTL)
	}
	trust, key, err := of.load(true)
	if err != nil {
		return err
	}
	counters, err := of.counters()
	if err != nil {
		return err
	}
	plan, err := rollout.LoadPlan(pos[0])
	if err != nil {
		return err
	}
	live := newLiveTable(ctx, stdout)
	final, halted, err := controller.Run(ctx, controller.Config{MQTT: cfg, Plan: plan, Settle: *settle, Tick: *tick, Lease: *lease,
		Key: key, Trust: trust, Counters: counters, TakeOver: *takeOver, BrokerQueue: *queue, OnState: live.show, Out: stderr, Log: slog.New(slog.NewTextHandler(stderr, nil))})
	if final.Name == "" {
		return err // it never started
	}
	live.done(final)
	if errors.Is(err, controller.ErrHalted) && halted != nil {
		haltReport(stdout, bf, final, halted.Failed, halted.N)
	}
	return err
}
