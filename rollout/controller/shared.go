package controller

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/rollout"
)

// CheckGroup reads the state of every rollout the brokers retain and
// judges them against the plan (rollout.SharedGroup, one rollout per
// group): each warning goes to out, and a rollout of the group that a
// controller runs now refuses the start (rollout.ErrGroupBusy). It sees
// what a wildcard subscription delivers: on a broker that delivers no
// retained message to one (RabbitMQ) it finds nothing and passes. A state
// that does not verify (forged, too large) is passed over: a client that
// may only write under the rollouts' topics cannot block a start by it.
func CheckGroup(ctx context.Context, cfg mqtt.Config, trust rollout.Trust, plan *rollout.Plan, out io.Writer) error {
	filter := mqtt.Topics{Prefix: cfg.TopicPrefix}.RolloutState("+")
	newest := map[string]rollout.State{} // by rollout name, of every broker read
	reached := 0
	var lastErr error
	for _, b := range cfg.BrokerList() {
		var (
			mu  sync.Mutex
			raw = map[string][]byte{}
		)
		sess, err := mqtt.Open(ctx, cfg.Named(b), map[string]byte{filter: 1}, func(m mqtt.Message) {
			mu.Lock()
			defer mu.Unlock()
			raw[m.Topic] = m.Payload // an oversized one comes empty, and is passed over
		})
		if err == nil {
			err = sess.Sync(ctx)
			sess.Close()
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			lastErr = err
			continue
		}
		reached++
		mu.Lock()
		for topic, msg := range raw {
			if len(msg) == 0 {
				continue
			}
			s, _, err := trust.OpenState(topic, msg)
			if err != nil {
				continue
			}
			if cur, ok := newest[s.Name]; !ok || s.Newer(cur) {
				newest[s.Name] = s
			}
		}
		mu.Unlock()
	}
	if reached == 0 && lastErr != nil {
		return fmt.Errorf("reading the rollouts the broker retains: %w", lastErr)
	}
	others := make([]rollout.State, 0, len(newest))
	for _, name := range slices.Sorted(maps.Keys(newest)) {
		others = append(others, newest[name])
	}
	warnings, err := rollout.SharedGroup(plan, others, time.Now())
	for _, w := range warnings {
		fmt.Fprintf(out, "rollout %s: %s\n", plan.Name, w)
	}
	return err
}
