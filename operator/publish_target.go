package operator

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/otad/otad/fleetview"
	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/verify"
)

// publishTarget is the devices a publish is for, as their statuses say,
// and the session it publishes on.
type publishTarget struct {
	sess   *mqtt.Session
	view   *fleetview.View
	filter fleetview.Filter
	group  string
	topics mqtt.Topics
}

// openTarget reads the statuses of the device (its retained status), or of
// the group's devices (those that answer a report request within window,
// and the retained statuses the broker delivers).
func openTarget(ctx context.Context, cfg mqtt.Config, device, group string, window time.Duration) (*publishTarget, error) {
	t := &publishTarget{view: fleetview.New(cfg.TopicPrefix), group: group, topics: mqtt.Topics{Prefix: cfg.TopicPrefix}}
	if device != "" {
		t.filter.Devices = []string{device}
		status := mqtt.Topics{Prefix: cfg.TopicPrefix, Device: device}.Status()
		sess, err := mqtt.Open(ctx, cfg, map[string]byte{status: 1}, func(m mqtt.Message) { t.view.ObserveMessage(m) })
		if err != nil {
			return nil, err
		}
		t.sess = sess
		// An exact topic's retained message comes on every broker; Sync
		// returns once it is in.
		if err := sess.Sync(ctx); err != nil {
			sess.Close()
			return nil, fmt.Errorf("reading %s: %w", status, err)
		}
		return t, nil
	}
	t.filter.Group = group
	var last atomic.Int64
	sess, err := t.view.Follow(ctx, cfg, fleetview.FollowOptions{Window: window, Group: group, Changed: func() { last.Store(time.Now().UnixNano()) }})
	if err != nil {
		return nil, err
	}
	t.sess = sess
	if window > 0 {
		_ = waitAnswers(ctx, t.view, &last, window) // ctx's end is returned below
	} else if err := sess.Sync(ctx); err != nil {
		sess.Close()
		return nil, err
	}
	return t, ctx.Err()
}

// statuses are the target devices' latest statuses, by ID.
func (t *publishTarget) statuses() map[string]ota.Status {
	out := map[string]ota.Status{}
	for _, d := range t.view.Query(t.filter, 0, 0).Devices {
		if st, ok := t.view.Status(d.ID); ok {
			out[d.ID] = st
		}
	}
	return out
}

// clearTarget clears the retained offer on topic, and for a group on the
// desired topic of each of its devices, where a rollout leaves its offers.
func clearTarget(ctx context.Context, cfg mqtt.Config, t *publishTarget, topic string, stderr io.Writer) error {
	if err := publishOnEveryNode(ctx, cfg, topic, nil, stderr); err != nil {
		return err
	}
	var topics, members []string
	if t.group != "" {
		for id := range t.statuses() {
			members = append(members, id)
		}
		sort.Strings(members)
		for _, id := range members {
			topics = append(topics, mqtt.Topics{Prefix: t.topics.Prefix, Device: id}.Desired())
		}
	}
	if err := t.sess.PublishRetained(ctx, nil, topics...); err != nil {
		return err
	}
	if t.group == "" {
		fmt.Fprintf(stderr, "cleared the retained offer on %s\n", topic)
		return nil
	}
	fmt.Fprintf(stderr, "cleared the retained offer on %s and on the desired topic of the %d devices of group %s heard of (%s)\n",
		topic, len(members), t.group, t.view.Coverage())
	return nil
}

// alreadyEnded is the warnings for publishing an offer that already ended
// on some of the target devices (none when it ended on none). A final
// ending never starts again: there the publish changes nothing. A
// retryable one starts again only with a greater attempt counter, which
// --retry (retry) carries (docs/contract/installing.md, final and
// retryable endings).
func alreadyEnded(envelope []byte, statuses map[string]ota.Status, retry bool) []string {
	digest := verify.EnvelopeDigest(envelope)
	env, err := verify.ParseEnvelope(envelope)
	if err != nil {
		return nil
	}
	m, err := verify.ParseManifest(env.Manifest)
	if err != nil {
		return nil
	}
	var final, retryable []string
	for id, st := range statuses {
		r := st.LastResult
		if r == nil || r.Result == ota.ResultStaged || r.Result == ota.ResultPending {
			continue
		}
		// The manifest's digest names this very offer; a device whose
		// status does not carry it is matched on the id and the image.
		same := r.ManifestSHA256 == digest
		if r.ManifestSHA256 == "" {
			same = r.ID == m.ID && r.SHA256 == m.Payload.SHA256
		}
		switch {
		case !same || digest == "":
		case r.Retryable:
			retryable = append(retryable, id+": "+fleetview.Brief(*r))
		default:
			final = append(final, id+": "+fleetview.Brief(*r))
		}
	}
	var out []string
	if len(final) > 0 {
		out = append(out, fmt.Sprintf("warning: offer %s already ended for good on %d of the %d target devices heard of (%s): a final ending never starts again, "+
			"so on them this publish changes nothing. To try again, sign the image again (otactl sign: a new issued_at makes a new offer) and publish that.",
			m.ID, len(final), len(statuses), listed(final)))
	}
	if len(retryable) > 0 && !retry {
		out = append(out, fmt.Sprintf("warning: offer %s ended retryable on %d of the %d target devices heard of (%s): a publish of the same envelope does not start it again there; "+
			"otactl publish --retry does.", m.ID, len(retryable), len(statuses), listed(retryable)))
	}
	return out
}

// listed is the devices named in a warning, the first ten of them.
func listed(ended []string) string {
	sort.Strings(ended)
	if len(ended) > 10 {
		ended = append(ended[:10:10], fmt.Sprintf("and %d more", len(ended)-10))
	}
	return strings.Join(ended, ", ")
}
