package controller

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/rollout"
)

// warnings is a slog handler keeping the messages of the warnings logged.
type warnings struct {
	mu   *sync.Mutex
	msgs *[]string
}

func newWarnings() warnings { return warnings{mu: &sync.Mutex{}, msgs: &[]string{}} }

func (w warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w warnings) Handle(_ context.Context, r slog.Record) error {
	if r.Level == slog.LevelWarn {
		w.mu.Lock()
		*w.msgs = append(*w.msgs, r.Message)
		w.mu.Unlock()
	}
	return nil
}
func (w warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w warnings) WithGroup(string) slog.Handler      { return w }

// with are the warnings logged so far that contain each of parts.
func (w warnings) with(parts ...string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
next:
	for _, m := range *w.msgs {
		for _, p := range parts {
			if !strings.Contains(m, p) {
				continue next
			}
		}
		out = append(out, m)
	}
	return out
}

// once waits for a warning containing each of parts, then long enough for
// another copy of the message to have arrived through any other session,
// and fails unless exactly one was logged.
func (w warnings) once(t *testing.T, what string, parts ...string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); len(w.with(parts...)) == 0 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(time.Second)
	if got := w.with(parts...); len(got) != 1 {
		t.Errorf("%s: %d warnings, want 1: %q", what, len(got), got)
	}
}

// One forged or replayed message on a running controller's topics is one
// warning (docs/contract/rollouts.md, a signed control plane), naming the
// topic and why, however many of the controller's sessions follow the
// topic: the primary's and, once fenced, the one that publishes the state
// (pub) used to report each copy.
func TestForgedAndReplayedWarnedOnce(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{Quiet: true})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	key, trust := operatorKey(t)
	// Two devices that never answer: the rollout waits for them (an hour).
	p := testPlan(5, 1, named(0, "d1", "d2"))
	states := make(chan rollout.State, 100)
	w := newWarnings()
	cfg := Config{MQTT: mqtt.Config{Broker: b.URL}, Plan: p, Settle: 200 * time.Millisecond, Tick: 100 * time.Millisecond,
		Lease: 3 * time.Second, Key: key, Trust: trust, Log: slog.New(w),
		OnState: func(s rollout.State) {
			select {
			case states <- s:
			default:
			}
		}}
	ended := make(chan error, 1)
	go func() {
		_, _, err := Run(ctx, cfg)
		ended <- err
	}()
	next := func(what string) rollout.State {
		t.Helper()
		select {
		case s := <-states:
			return s
		case err := <-ended:
			t.Fatalf("the controller ended (%v) before %s", err, what)
		case <-ctx.Done():
			t.Fatalf("no state before %s", what)
		}
		return rollout.State{}
	}
	first := next("it started") // fenced: pub follows the state too
	var live rollout.State
	for live = next("a renewal"); !live.Newer(first); live = next("a renewal") {
	}

	const topic = "ota/rollouts/r1/state"
	c := mosquittotest.Client(t, b.URL, "mallory")
	forged := live
	forged.Lease = &rollout.Lease{Holder: "mallory", Epoch: live.Lease.Epoch + 1, Since: time.Now(), Renewed: time.Now(), TTLMS: 600000}
	c.Publish(topic, 1, false, mustSeal(t, nil, topic, forged)).Wait()
	w.once(t, "a forged state", "forged state on "+topic+" ignored", "(an unsigned message)")

	// The first state, signed by the operator key, published again.
	c.Publish(topic, 1, false, mustSeal(t, key, topic, first)).Wait()
	w.once(t, "a replayed state", "replayed state on "+topic+" refused", "counter "+strconv.FormatUint(first.Counter(), 10))

	c.Publish("ota/rollouts/r1/control", 1, false, `{"id":"evil","op":"pause","time":"`+time.Now().UTC().Format(time.RFC3339Nano)+`"}`).Wait()
	w.once(t, "a forged command", "forged command on ota/rollouts/r1/control ignored", "(an unsigned message)")

	select {
	case err := <-ended:
		t.Fatalf("the controller ended: %v", err)
	default:
	}
	cancel()
	<-ended
}

// A controller started over a forged state reads it twice (the lease
// first, then as the controller) and refuses it: one warning, and the
// error naming it.
func TestForgedRetainedWarnedOnceAtStart(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{Quiet: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key, trust := operatorKey(t)
	p := testPlan(5, 1, named(0, "d1"))
	const topic = "ota/rollouts/r1/state"
	if err := mqtt.PublishRetained(ctx, mqtt.Config{Broker: b.URL}, topic, mustSeal(t, nil, topic, rollout.NewState(p, time.Now()))); err != nil {
		t.Fatal(err)
	}
	w := newWarnings()
	_, _, err := Run(ctx, Config{MQTT: mqtt.Config{Broker: b.URL}, Plan: p, Settle: 200 * time.Millisecond, Tick: 100 * time.Millisecond,
		Lease: 3 * time.Second, Key: key, Trust: trust, Log: slog.New(w)})
	if err == nil || !strings.Contains(err.Error(), "not starting over it") {
		t.Fatalf("started over a forged state: %v", err)
	}
	if got := w.with("forged state on " + topic + " ignored"); len(got) != 1 {
		t.Errorf("%d warnings, want 1: %q", len(got), got)
	}
}

// With several broker nodes, the primary's node is read through its
// session and its replica's, and a broker that replicates what it retains
// holds the same copy on each: one forged copy is one warning, and a
// signed copy elsewhere is gone on from.
func TestForgedRetainedCopiesWarnedOnce(t *testing.T) {
	key, trust := operatorKey(t)
	p := testPlan(5, 1, named(0, "d1"))
	const topic = "ota/rollouts/r1/state"
	w := newWarnings()
	log := slog.New(w)
	inbox := func(payload []byte) *Inbox {
		in := NewInbox(mqtt.Topics{Prefix: "ota"}, "r1", trust, log)
		in.Receive(mqtt.Message{Topic: topic, Payload: payload})
		return in
	}
	forged := mustSeal(t, nil, topic, rollout.NewState(p, t0))
	good := rollout.NewState(p, t0)
	good.Seq = 3
	c := &controller{topics: mqtt.Topics{Prefix: "ota"}, trust: trust, log: log, inbox: inbox(forged),
		replicas: []replica{{inbox: inbox(forged)}, {inbox: inbox(forged)}, {inbox: inbox(mustSeal(t, key, topic, good))}}}
	raw, err := c.retained()
	if err != nil {
		t.Fatal(err)
	}
	if s, _, err := trust.OpenState(topic, raw); err != nil || s.Seq != 3 {
		t.Fatalf("went on from %s (%v), want the signed copy", raw, err)
	}
	if got := w.with("forged state on " + topic + " ignored"); len(got) != 1 {
		t.Errorf("%d warnings, want 1: %q", len(got), got)
	}
}
