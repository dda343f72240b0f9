package controller

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/rollout"
	"github.com/otad/otad/rollout/seen"
)

// A controller signs the state it publishes, and goes on only from a
// state a trusted operator key signed for this topic: a forged one (its
// lease, its halt) is never taken, nor written over.
func TestDriverStartSigned(t *testing.T) {
	key, trust := operatorKey(t)
	other, _ := operatorKey(t)
	p := testPlan(5, 1, named(0, "d1"), rollout.Wave{Percent: 100})
	const topic = "ota/rollouts/r1/state"
	running, _ := rollout.Step(rollout.NewState(p, t0), p, rollout.Observe{View: view("d1")}, t0)
	running.Lease = &rollout.Lease{Holder: "ctl-a", Epoch: 3, Since: t0.Add(-time.Hour), Renewed: t0.Add(-time.Hour), TTLMS: 30000, Released: t0.Add(-time.Hour)}
	halted := running
	halted.Halted = &rollout.Mark{Time: t0, Reason: "forged"}
	held := running
	held.Lease = &rollout.Lease{Holder: "mallory", Epoch: 1 << 20, Since: t0, Renewed: t0, TTLMS: int64(rollout.MaxLeaseTTL / time.Millisecond)}
	tests := []struct {
		name     string
		retained []byte
		err      string
	}{
		{"its own, signed", mustSeal(t, key, topic, running), ""},
		{"a lease, unsigned", mustSeal(t, nil, topic, held), "forged state on " + topic + " ignored: not signed by a trusted operator key"},
		{"a halt, signed by an untrusted key", mustSeal(t, other, topic, halted), "forged state on " + topic + " ignored: not signed by a trusted operator key"},
		{"signed for another rollout", mustSeal(t, key, "ota/rollouts/r9/state", halted), "signed for ota/rollouts/r9/state"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pub := &retain{msgs: map[string][]byte{}}
			d := &Driver{Plan: p, Topics: mqtt.Topics{Prefix: "ota"}, Pub: pub, Key: key, Trust: trust, Holder: "ctl-b", Now: func() time.Time { return t0 }}
			s, _, err := d.Start(context.Background(), tc.retained)
			if tc.err != "" {
				if !errors.Is(err, ErrBadState) || !errors.Is(err, rollout.ErrForged) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("%v, want %q", err, tc.err)
				}
				if len(pub.msgs) != 0 {
					t.Fatal("published over a forged state")
				}
				return
			}
			if err != nil || s.Lease.Holder != "ctl-b" || s.Lease.Epoch != 4 {
				t.Fatalf("%v, lease %+v", err, s.Lease)
			}
			got, _, err := trust.OpenState(topic, pub.msgs[topic])
			if err != nil || got.Lease.Holder != "ctl-b" {
				t.Fatalf("the state published does not verify: %v", err)
			}
			if _, _, err := (rollout.Trust{}).OpenState(topic, pub.msgs[topic]); !errors.Is(err, rollout.ErrForged) {
				t.Fatalf("verified with no key trusted: %v", err)
			}
		})
	}
}

// A running controller's inbox takes only what a trusted operator key
// signed: a forged lease (another holder, a higher epoch, a ten-year TTL)
// does not stop it, a forged pause is no command, a forged record no
// record; an older signed state published again is refused; each is
// reported.
func TestInboxRefusesForgedAndReplayed(t *testing.T) {
	key, trust := operatorKey(t)
	other, _ := operatorKey(t)
	var logged bytes.Buffer
	in := NewInbox(mqtt.Topics{Prefix: "ota"}, "r1", trust, slog.New(slog.NewTextHandler(&logged, nil)))
	const topic = "ota/rollouts/r1/state"
	p := testPlan(5, 1, rollout.Wave{Percent: 100})
	mine := rollout.NewState(p, t0)
	mine.Lease = &rollout.Lease{Holder: "me", Epoch: 2, Since: t0, Renewed: t0, TTLMS: 30000}
	mine.Seq = 10
	in.Receive(mqtt.Message{Topic: topic, Payload: mustSeal(t, key, topic, mine)})
	if raw, err := in.Retained(); err != nil || len(raw) == 0 {
		t.Fatalf("own state: %q %v", raw, err)
	}
	in.Hold(*mine.Lease)
	forged := mine
	forged.Lease = &rollout.Lease{Holder: "mallory", Epoch: 3, Since: t0, Renewed: t0, TTLMS: int64(rollout.MaxLeaseTTL / time.Millisecond)}
	forged.Halted = &rollout.Mark{Time: t0, Reason: "forged"}
	in.Receive(mqtt.Message{Topic: topic, Payload: mustSeal(t, nil, topic, forged)})
	in.Receive(mqtt.Message{Topic: topic, Payload: mustSeal(t, other, topic, forged)})
	older := mine
	older.Seq = 4
	in.Receive(mqtt.Message{Topic: topic, Payload: mustSeal(t, key, topic, older)})
	pause := rollout.NewCommand(rollout.OpPause, "forged", "mallory", t0)
	pb, _ := pause.Encode()
	in.Receive(mqtt.Message{Topic: "ota/rollouts/r1/control", Payload: pb})
	in.Receive(mqtt.Message{Topic: "ota/rollouts/r1/devices/d1", Payload: []byte(`{"device":"d1","wave":1,"accepted":"failed"}`)})
	select {
	case s := <-in.Seen():
		t.Fatalf("a forged or older state was seen: %+v", s.Lease)
	case c := <-in.Commands():
		t.Fatalf("a forged command was taken: %+v", c)
	default:
	}
	if r := in.Records(); len(r) != 0 {
		t.Fatalf("a forged record was taken: %+v", r)
	}
	if err := in.Check(synced{})(context.Background()); err != nil {
		t.Fatalf("a forged lease stopped the controller: %v", err)
	}
	out := logged.String()
	for _, want := range []string{
		"forged state on ota/rollouts/r1/state ignored: not signed by a trusted operator key (an unsigned message)",
		"forged state on ota/rollouts/r1/state ignored: not signed by a trusted operator key",
		"replayed state on ota/rollouts/r1/state refused",
		"forged command on ota/rollouts/r1/control ignored: not signed by a trusted operator key",
		"forged record on ota/rollouts/r1/devices/d1 ignored",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("not reported: %q\n%s", want, out)
		}
	}
	// A signed command goes through; one issued before it, published again,
	// does not.
	resume := rollout.NewCommand(rollout.OpResume, "", "op", t0.Add(time.Minute))
	rb, _ := resume.Encode()
	rb, _ = rollout.Seal(key, "ota/rollouts/r1/control", uint64(resume.Time.UnixMilli()), rb)
	in.Receive(mqtt.Message{Topic: "ota/rollouts/r1/control", Payload: rb})
	oldPause := rollout.NewCommand(rollout.OpPause, "", "op", t0)
	ob, _ := oldPause.Encode()
	ob, _ = rollout.Seal(key, "ota/rollouts/r1/control", uint64(oldPause.Time.UnixMilli()), ob)
	in.Receive(mqtt.Message{Topic: "ota/rollouts/r1/control", Payload: ob})
	if c := <-in.Commands(); c.ID != resume.ID || len(in.Commands()) != 0 {
		t.Fatalf("commands: %+v and %d more", c, len(in.Commands()))
	}
	if !strings.Contains(logged.String(), "replayed command on ota/rollouts/r1/control refused") {
		t.Errorf("the replayed command not reported:\n%s", logged.String())
	}
}

// synced is a session that has delivered what the broker retains.
type synced struct{}

func (synced) Sync(context.Context) error { return nil }

// With counters kept on disk, a controller started again refuses an older
// command or state published while none ran; the latest ones, delivered
// again as retained, are no replay.
func TestInboxRemembersAcrossRestarts(t *testing.T) {
	key, trust := operatorKey(t)
	dir := t.TempDir()
	const control, topic = "ota/rollouts/r1/control", "ota/rollouts/r1/state"
	ck := CountersKey(mqtt.Config{Broker: "mqtt://b:1883"}, "r1")
	command := func(op rollout.Op, at time.Time) (rollout.Command, []byte) {
		c := rollout.NewCommand(op, "", "op", at)
		b, _ := c.Encode()
		b, err := rollout.Seal(key, control, uint64(c.Time.UnixMilli()), b)
		if err != nil {
			t.Fatal(err)
		}
		return c, b
	}
	p := testPlan(5, 1, rollout.Wave{Percent: 100})
	state := func(seq uint64) rollout.State {
		s := rollout.NewState(p, t0)
		s.Lease = &rollout.Lease{Holder: "me", Epoch: 2, Since: t0, Renewed: t0, TTLMS: 30000}
		s.Seq = seq
		return s
	}
	start := func() (*Inbox, *bytes.Buffer) {
		counters, err := seen.Open(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		var logged bytes.Buffer
		in := NewInbox(mqtt.Topics{Prefix: "ota"}, "r1", trust, slog.New(slog.NewTextHandler(&logged, nil)))
		in.Remember(counters, ck)
		in.Retained()
		return in, &logged
	}
	oldPause, ob := command(rollout.OpPause, t0)
	resume, rb := command(rollout.OpResume, t0.Add(time.Minute))
	in, _ := start()
	for _, b := range [][]byte{ob, rb} {
		in.Receive(mqtt.Message{Topic: control, Payload: b})
	}
	in.Receive(mqtt.Message{Topic: topic, Payload: mustSeal(t, key, topic, state(9))})
	if got := []string{(<-in.Commands()).ID, (<-in.Commands()).ID}; got[0] != oldPause.ID || got[1] != resume.ID {
		t.Fatalf("first run took %v", got)
	}

	// Started again: the older pause, published again while no controller
	// ran, is a replay; the retained resume delivered again is taken (the
	// state's LastCommand applies it once).
	in, logged := start()
	in.Receive(mqtt.Message{Topic: control, Payload: ob})
	in.Receive(mqtt.Message{Topic: control, Payload: rb})
	in.Receive(mqtt.Message{Topic: topic, Payload: mustSeal(t, key, topic, state(7))})
	in.Receive(mqtt.Message{Topic: topic, Payload: mustSeal(t, key, topic, state(9))})
	if c := <-in.Commands(); c.ID != resume.ID || len(in.Commands()) != 0 {
		t.Fatalf("after a restart took %+v and %d more", c, len(in.Commands()))
	}
	if s := <-in.Seen(); s.Seq != 9 {
		t.Fatalf("after a restart saw seq %d, want its latest, 9", s.Seq)
	}
	for _, want := range []string{
		"replayed command on " + control + " refused: counter " + strconv.FormatInt(t0.UnixMilli(), 10) + " older than " + strconv.FormatInt(resume.Time.UnixMilli(), 10) + " seen",
		"replayed state on " + topic + " refused: counter " + strconv.FormatUint(state(7).Counter(), 10) + " older than " + strconv.FormatUint(state(9).Counter(), 10) + " seen",
	} {
		if !strings.Contains(logged.String(), want) {
			t.Errorf("not reported: %q\n%s", want, logged.String())
		}
	}
}

// Two controllers started at once (docs/contract/rollouts.md): the claim
// of one that read the state before the other's claim landed, arriving
// after the other's next state, is older; it is passed over, said as what
// it is rather than as a replay, and the lease held stays held.
func TestInboxPassesOverAStaleClaim(t *testing.T) {
	key, trust := operatorKey(t)
	var logged bytes.Buffer
	in := NewInbox(mqtt.Topics{Prefix: "ota"}, "r1", trust, slog.New(slog.NewTextHandler(&logged, nil)))
	const topic = "ota/rollouts/r1/state"
	p := testPlan(5, 1, rollout.Wave{Percent: 100})
	in.Retained() // nothing retained: a new rollout
	mine := rollout.NewState(p, t0)
	mine.Lease = &rollout.Lease{Holder: "me", Epoch: 1, Since: t0, Renewed: t0, TTLMS: 30000}
	mine.Seq = 1
	in.Hold(*mine.Lease)
	in.Receive(mqtt.Message{Topic: topic, Payload: mustSeal(t, key, topic, mine)})
	<-in.Seen()
	next := mine
	next.Seq = 2
	in.Receive(mqtt.Message{Topic: topic, Payload: mustSeal(t, key, topic, next)})
	<-in.Seen()
	stale := rollout.NewState(p, t0)
	stale.Lease = &rollout.Lease{Holder: "other", Epoch: 1, Since: t0, Renewed: t0, TTLMS: 30000}
	stale.Seq = 1
	in.Receive(mqtt.Message{Topic: topic, Payload: mustSeal(t, key, topic, stale)})
	select {
	case s := <-in.Seen():
		t.Fatalf("the stale claim was seen: %+v", s.Lease)
	default:
	}
	if err := in.Check(synced{})(context.Background()); err != nil {
		t.Fatalf("a stale claim stopped the holder: %v", err)
	}
	want := "a claim of rollout r1 by other made from an older state is passed over: counter " + strconv.FormatUint(stale.Counter(), 10) +
		", older than " + strconv.FormatUint(next.Counter(), 10) + " here"
	if out := logged.String(); !strings.Contains(out, want) || strings.Contains(out, "replayed") {
		t.Fatalf("logged %s\nwant %q", out, want)
	}
}
