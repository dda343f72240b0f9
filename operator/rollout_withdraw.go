package operator

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/otad/otad/fleetview"
	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/rollout"
	"github.com/otad/otad/verify"
)

// withdrawBatch is how many desired topics one subscription reads.
const withdrawBatch = 500

// withdraw clears the rollout's offer where it is retained on a device's
// desired topic (docs/contract/rollouts.md, abort --withdraw): it looks at
// the desired topics of the group's devices (heard of through a report
// request within window) and of every device whose desired topic the broker
// delivers to a wildcard subscription, and clears only those that hold this
// rollout's offer, so an offer published otherwise is left alone.
func withdraw(ctx context.Context, cfg mqtt.Config, s rollout.State, window time.Duration, w io.Writer) error {
	fv := fleetview.New(cfg.TopicPrefix)
	t := mqtt.Topics{Prefix: cfg.TopicPrefix}
	var (
		mu      sync.Mutex
		desired = map[string][]byte{} // topic → retained payload
		last    atomic.Int64
	)
	sess, err := fv.Follow(ctx, cfg, fleetview.FollowOptions{Window: window, Group: s.Group,
		Extra: map[string]byte{mqtt.Topics{Prefix: cfg.TopicPrefix, Device: "+"}.Desired(): 0},
		Other: func(m mqtt.Message) {
			if _, leaf, ok := mqtt.DeviceOf(cfg.TopicPrefix, m.Topic); ok && leaf == "desired" {
				mu.Lock()
				desired[m.Topic] = m.Payload
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
	if window > 0 {
		if err := waitAnswers(ctx, fv, &last, window); err != nil {
			return err
		}
	}
	// The group's devices whose desired topic the wildcard did not bring
	// (RabbitMQ brings none): read theirs by exact topic.
	var unread []string
	mu.Lock()
	for _, d := range fv.Query(fleetview.Filter{Group: s.Group}, 0, 0).Devices {
		topic := mqtt.Topics{Prefix: t.Prefix, Device: d.ID}.Desired()
		if _, ok := desired[topic]; !ok {
			unread = append(unread, topic)
		}
	}
	mu.Unlock()
	for start := 0; start < len(unread); start += withdrawBatch {
		filters := map[string]byte{}
		for _, topic := range unread[start:min(start+withdrawBatch, len(unread))] {
			filters[topic] = 0
		}
		if err := sess.Subscribe(ctx, filters); err != nil {
			return err
		}
		err := sess.Sync(ctx)
		_ = sess.Unsubscribe(context.WithoutCancel(ctx), slices.Collect(maps.Keys(filters))...)
		if err != nil {
			return err
		}
	}
	mu.Lock()
	var clear []string
	for topic, payload := range desired {
		// By the manifest's digest: the same image signed again for
		// another rollout has the same id and payload, and stays.
		if o := offerOf(payload); o.ID != "" && s.Offer.Names(o.ID, o.SHA256, o.ManifestSHA256) {
			clear = append(clear, topic)
		}
	}
	mu.Unlock()
	slices.Sort(clear)
	if err := sess.PublishRetained(ctx, nil, clear...); err != nil {
		return err
	}
	fmt.Fprintf(w, "withdrew the offer %s of rollout %s: cleared it from the desired topics of %s (%s)\n", s.Offer.ID, s.Name, plural(len(clear), "device"), fv.Coverage())
	return nil
}

// offerOf names the offer an envelope carries (its manifest's digest, id
// and payload sha256); zero for what is none.
func offerOf(envelope []byte) rollout.Ref {
	if len(envelope) == 0 {
		return rollout.Ref{}
	}
	env, err := verify.ParseEnvelope(envelope)
	if err != nil {
		return rollout.Ref{}
	}
	m, err := verify.ParseManifest(env.Manifest)
	if err != nil {
		return rollout.Ref{}
	}
	return rollout.Ref{ID: m.ID, SHA256: m.Payload.SHA256, ManifestSHA256: verify.EnvelopeDigest(envelope)}
}
