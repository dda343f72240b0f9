package operator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/otad/otad/fleetview"
	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/rollout"
	"github.com/otad/otad/rollout/controller"
)

// rolloutCheck checks a plan without starting it (docs/contract/rollouts.md):
// every mistake at once (exit 2); with --broker, each wave's size and first
// members from the fleet as it is now. It publishes nothing but a report
// request to the group.
func rolloutCheck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("rollout check", "[--broker URL [--settle 3s]] PLAN", stderr)
	bf := addBrokerFlags(fs)
	of := addOperatorFlags(fs, false)
	settle := fs.Duration("settle", 3*time.Second, "with --broker: ask the group's devices to report within this long, as the controller does")
	show := fs.Int("show", 5, "with --broker: how many of each wave's first members to name")
	queue := fs.Int("broker-queue", rollout.DefaultBrokerQueue, "the messages the broker queues for one client before it drops (0: no limit): the plan's pace and, with --broker, its waves are checked against it as start checks them (docs/brokers.md)")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("want exactly one PLAN file, got %d arguments", len(pos))
	}
	if *settle < 0 || *show < 0 || *queue < 0 {
		return usagef("--settle, --show and --broker-queue must not be negative")
	}
	plan, err := rollout.LoadPlan(pos[0])
	if err != nil {
		n := 1
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			n = len(j.Unwrap())
		}
		return usagef("%s: %s:\n%w", pos[0], plural(n, "mistake"), err)
	}
	describePlan(stdout, plan)
	if err := rollout.PacePreflight(plan, *queue); err != nil {
		return err
	}
	if len(bf.brokers) == 0 {
		fmt.Fprintln(stdout, "the plan is valid (give --broker to size its waves from the fleet)")
		return nil
	}
	cfg, err := bf.config()
	if err != nil {
		return err
	}
	trust, _, err := of.load(false)
	if err != nil {
		return err
	}
	return sizeWaves(ctx, cfg, trust, plan, *settle, *show, *queue, stdout)
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// describePlan says what the plan will do.
func describePlan(w io.Writer, p *rollout.Plan) {
	fmt.Fprintf(w, "plan %s: rollout %s releases %s (version %s, sha256 %.12s) to group %s in %s; plan hash %.12s\n",
		p.Path, p.Name, p.Offer.ID, p.Offer.Version, p.Offer.SHA256, p.Group, plural(len(p.Waves), "wave"), p.Hash)
	h := p.Halt
	fmt.Fprintf(w, "  halt: above %v%% failed of the devices with an outcome, judged once %d are in and at every wave end; device timeout %v\n",
		h.MaxFailedPercent, h.MinOutcomes, h.DeviceTimeout)
	for i, wv := range p.Waves {
		what := fmt.Sprintf("%v%% of the group (cumulative)", wv.Percent)
		if wv.Devices != nil {
			what = "devices " + strings.Join(wv.Devices, ", ")
		}
		if wv.Soak > 0 {
			what += fmt.Sprintf(", then soak %v", wv.Soak)
		}
		fmt.Fprintf(w, "  wave %d: %s\n", i+1, what)
	}
}

// sizeWaves follows the group as the controller would and prints the
// members each wave would take if it started now, and whether the rollout
// exists on the broker already.
func sizeWaves(ctx context.Context, cfg mqtt.Config, trust rollout.Trust, p *rollout.Plan, settle time.Duration, show, queue int, w io.Writer) error {
	fv := fleetview.New(cfg.TopicPrefix)
	stateTopic := mqtt.Topics{Prefix: cfg.TopicPrefix}.RolloutState(p.Name)
	var (
		mu       sync.Mutex
		retained []byte
		tooLarge error // the retained state was dropped unread: no "not on the broker yet"
		last     atomic.Int64
	)
	sess, err := fv.Follow(ctx, cfg, fleetview.FollowOptions{Window: settle, Group: p.Group,
		Extra: map[string]byte{stateTopic: 1},
		Other: func(m mqtt.Message) {
			if m.Topic == stateTopic {
				mu.Lock()
				retained, tooLarge = m.Payload, m.TooLarge("state of rollout "+p.Name)
				mu.Unlock()
			}
		},
		Changed: func() { last.Store(time.Now().UnixNano()) }})
	if err != nil {
		return err
	}
	defer sess.Close()
	if err := sess.Sync(ctx); err != nil {
		return err
	}
	if settle > 0 {
		if err := waitAnswers(ctx, fv, &last, settle); err != nil {
			return err
		}
	}
	var group []string
	heard := map[string]bool{}
	for _, d := range fv.Query(fleetview.Filter{Group: p.Group}, 0, 0).Devices {
		group = append(group, d.ID)
	}
	fv.Each(func(id string, _ ota.Status) { heard[id] = true })
	fmt.Fprintf(w, "group %s on %s: %s (%s)\n", p.Group, strings.Join(cfg.BrokerList(), ", "), plural(len(group), "device"), fv.Coverage())
	sayBadStatuses(w, fv, show)
	for i, members := range rollout.Assign(p, group) {
		var unseen []string
		for _, d := range members {
			if !heard[d] {
				unseen = append(unseen, d)
			}
		}
		line := fmt.Sprintf("  wave %d: %s", i+1, plural(len(members), "device"))
		if n := min(show, len(members)); n > 0 {
			line += ": " + strings.Join(members[:n], ", ")
			if n < len(members) {
				line += ", …"
			}
		}
		if len(unseen) > 0 {
			line += fmt.Sprintf(" (no status heard from %s: named, they would time out)", strings.Join(unseen, ", "))
		}
		fmt.Fprintln(w, line)
	}
	if err := rollout.WavePreflight(p, len(group), queue); err != nil {
		return err // start would refuse it
	}
	mu.Lock()
	raw, rawErr := retained, tooLarge
	mu.Unlock()
	if err := sayExisting(w, trust, p, stateTopic, raw, rawErr); err != nil {
		return err
	}
	// Another rollout of the group: what start would warn of or refuse.
	if err := controller.CheckGroup(ctx, cfg, trust, p, w); errors.Is(err, rollout.ErrGroupBusy) {
		return usagef("%v: start would refuse it", err)
	} else if err != nil {
		return err
	}
	return nil
}

// sayBadStatuses names the first show of the statuses not taken (an ID the
// contract forbids, not JSON, too large): they are in no group and no
// wave, and said so that the device is looked at.
func sayBadStatuses(w io.Writer, fv *fleetview.View, show int) {
	bad := fv.Query(fleetview.Filter{State: fleetview.StateBad}, 0, max(show, 1))
	if bad.Total == 0 {
		return
	}
	fmt.Fprintf(w, "  statuses not taken, in no wave: %d\n", bad.Total)
	for _, d := range bad.Devices[:min(show, len(bad.Devices))] {
		fmt.Fprintf(w, "    %s: %s\n", clean(d.ID), clean(d.BadStatus))
	}
}

// sayExisting says whether rollout p exists on the broker (its retained
// state raw, or rawErr when it was too large to read) and whether start
// would go on from it.
func sayExisting(w io.Writer, trust rollout.Trust, p *rollout.Plan, stateTopic string, raw []byte, rawErr error) error {
	if rawErr != nil {
		return usagef("rollout %s: the state retained on %s does not decode (%v): start would refuse it", p.Name, stateTopic, rawErr)
	}
	if len(raw) == 0 {
		fmt.Fprintf(w, "no rollout %s on the broker yet; nothing was published\n", p.Name)
		return nil
	}
	s, _, err := trust.OpenState(stateTopic, raw)
	switch {
	case err != nil:
		return usagef("rollout %s: the state retained on %s does not decode (%v): start would refuse it", p.Name, stateTopic, err)
	case s.PlanHash != p.Hash:
		return usagef("rollout %s exists on the broker with another plan (hash %.12s, this plan's %.12s): start would refuse it; a changed plan needs a new name",
			p.Name, s.PlanHash, p.Hash)
	}
	fmt.Fprintf(w, "rollout %s exists with this plan: %s, wave %d of %d (start goes on from it); nothing was published\n", p.Name, s.Phase, s.Wave, s.WaveCount)
	return nil
}
