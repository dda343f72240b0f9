package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/rollout"
)

// retain is a publisher that keeps the last message per topic.
type retain struct {
	mu   sync.Mutex
	msgs map[string][]byte
	fail error
}

func (r *retain) PublishRetained(_ context.Context, payload []byte, topics ...string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return r.fail
	}
	for _, t := range topics {
		r.msgs[t] = payload
	}
	return nil
}

// A controller starts from the retained state of its own plan, refuses
// another plan's, a state no controller wrote, or one whose lease another
// live controller holds; otherwise it takes the lease and publishes the
// state before anything else.
func TestDriverStart(t *testing.T) {
	p := testPlan(5, 1, named(0, "d1"), rollout.Wave{Percent: 100})
	const topic = "ota/rollouts/r1/state"
	running, _ := rollout.Step(rollout.NewState(p, t0), p, rollout.Observe{View: view("d1")}, t0)
	enc := func(s rollout.State) []byte { b, _ := s.Encode(); return b }
	otherPlan := running
	otherPlan.PlanHash = "h2"
	tooFar := running
	tooFar.Wave = 2
	held := running
	held.Lease = &rollout.Lease{Holder: "ctl-a", Epoch: 4, Since: t0.Add(-time.Hour), Renewed: t0.Add(-10 * time.Second), TTLMS: 30000}
	expired := held
	expired.Lease = &rollout.Lease{Holder: "ctl-a", Epoch: 4, Since: t0.Add(-time.Hour), Renewed: t0.Add(-31 * time.Second), TTLMS: 30000}
	tests := []struct {
		name     string
		retained []byte
		resumed  bool
		epoch    uint64
		err      string
	}{
		{"none retained: a new state, published", nil, false, 1, ""},
		{"its own", enc(running), true, 1, ""},
		{"another plan's", enc(otherPlan), false, 0, "rollout r1 already exists with another plan (hash h2, this plan's h1): a changed plan needs a new name"},
		{"not JSON", []byte("{"), false, 0, "retained state of rollout r1 on " + topic + ": unexpected end of JSON input"},
		{"waves no controller wrote", enc(tooFar), false, 0, "retained state of rollout r1 on " + topic + `: rollout "r1" in wave 2 of 2 with 1 waves recorded`},
		{"held by a live controller", enc(held), true, 0, "rollout held by another controller: rollout r1 is held by ctl-a (epoch 4) since 2026-11-29T09:00:00Z, renewed 2026-11-29T09:59:50Z; it expires at 2026-11-29T10:00:20Z unless renewed"},
		{"a lease expired: taken over", enc(expired), true, 5, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pub := &retain{msgs: map[string][]byte{}}
			d := &Driver{Plan: p, Topics: mqtt.Topics{Prefix: "ota"}, Pub: pub, Trust: unsigned, Holder: "ctl-b", Now: func() time.Time { return t0 }}
			s, resumed, err := d.Start(context.Background(), tc.retained)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("%v (resumed %v), want %q", err, resumed, tc.err)
				}
				if len(pub.msgs) != 0 {
					t.Fatal("published after refusing the retained state")
				}
				return
			}
			if err != nil || resumed != tc.resumed {
				t.Fatalf("%v, resumed %v", err, resumed)
			}
			got, err := rollout.DecodeState(pub.msgs[topic])
			if err != nil || got.PlanHash != "h1" || got.Lease == nil || got.Lease.Holder != "ctl-b" || got.Lease.Epoch != tc.epoch || s.Lease.Epoch != tc.epoch {
				t.Fatalf("published %+v (%v)", got, err)
			}
			if resumed && got.Wave != 1 {
				t.Fatalf("resumed in wave %d", got.Wave)
			}
		})
	}
	pub := &retain{msgs: map[string][]byte{}, fail: errors.New("connection lost")}
	d := &Driver{Plan: p, Topics: mqtt.Topics{Prefix: "ota"}, Pub: pub, Trust: unsigned, Holder: "ctl-b"}
	if _, _, err := d.Start(context.Background(), nil); err == nil {
		t.Fatal("a new state that was not published was taken")
	}
}

// A retained state comes from the broker: whatever Start accepts, Step can
// go on from without failing.
func FuzzStart(f *testing.F) {
	p := testPlan(5, 1, named(0, "d1"), rollout.Wave{Percent: 10}, rollout.Wave{Percent: 100})
	s, _ := rollout.Step(rollout.NewState(p, t0), p, rollout.Observe{View: view("d1")}, t0)
	b, _ := s.Encode()
	f.Add(b)
	f.Add([]byte(`{"name":"r1","plan_hash":"h1","wave_count":3,"wave":1,"waves":[{"kind":"devices"}]}`))
	f.Add([]byte(`{"name":"r1","plan_hash":"h1","wave_count":3,"wave":2,"waves":[{"kind":"devices","cursor":"ffffffffffffffff"},{"kind":"percent","through":"0000000000000001","ended":"2026-11-29T10:00:00Z"}]}`))
	f.Add([]byte(`{"name":"r1","plan_hash":"h1","wave_count":3,"wave":3,"waves":[{"kind":"devices"},{"kind":"percent","chosen":0},{"kind":"percent","through":"ffffffffffffffff","next":"0000000000000000","pace":{"per_minute":-1,"tokens":1e308}}],"halted":{},"lease":{"holder":"x","epoch":18446744073709551615,"ttl_ms":-5}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		d := &Driver{Plan: p, Topics: mqtt.Topics{Prefix: "ota"}, Pub: &retain{msgs: map[string][]byte{}}, Trust: unsigned, Holder: "me", Now: func() time.Time { return t0 }}
		s, _, err := d.Start(context.Background(), b)
		if err != nil {
			return
		}
		for i, in := range []rollout.Input{rollout.Observe{View: view("d1", "d2=failed", "d3=success")}, rollout.Offered{Wave: s.Wave}, rollout.Command{ID: "x", Op: rollout.OpResume}, rollout.Observe{View: view("d2")}} {
			s, _ = rollout.Step(s, p, in, t0.Add(time.Duration(i)*time.Second))
		}
		if _, err := s.Encode(); err != nil {
			t.Fatalf("a state stepped from %q cannot be published: %v", b, err)
		}
	})
}

func TestInbox(t *testing.T) {
	in := NewInbox(mqtt.Topics{Prefix: "ota"}, "r1", unsigned, nil)
	if got := fmt.Sprint(in.Topics()); got != "map[ota/rollouts/r1/control:1 ota/rollouts/r1/devices/+:0 ota/rollouts/r1/state:1]" {
		t.Fatalf("topics %s", got)
	}
	retained := `{"name":"r1","wave_count":1,"seq":3,"lease":{"holder":"a","epoch":2,"ttl_ms":30000}}`
	in.Receive(mqtt.Message{Topic: "ota/rollouts/r1/state", Payload: []byte(retained)})
	in.Receive(mqtt.Message{Topic: "ota/rollouts/r1/control", Payload: []byte(`{"id":"c1","op":"pause"}`)})
	in.Receive(mqtt.Message{Topic: "ota/rollouts/r1/control", Payload: []byte(`{"op":"pause"}`)}) // no id: dropped
	in.Receive(mqtt.Message{Topic: "ota/rollouts/r2/control", Payload: []byte(`{"id":"c9","op":"abort"}`)})
	in.Receive(mqtt.Message{Topic: "ota/rollouts/r1/devices/d1", Payload: []byte(`{"device":"d1","wave":1,"accepted":"failed"}`)})
	in.Receive(mqtt.Message{Topic: "ota/rollouts/r1/devices/d2", Payload: []byte(`{"device":"d9","wave":1}`)}) // another's: dropped
	if got, err := in.Retained(); string(got) != retained || err != nil {
		t.Fatalf("retained %q %v", got, err)
	}
	if r := in.Records(); len(r) != 1 || r["d1"].Accepted != ota.ResultFailed {
		t.Fatalf("records %+v", r)
	}
	in.Receive(mqtt.Message{Topic: "ota/rollouts/r1/state", Payload: []byte(`{"name":"r1","wave_count":1,"seq":4,"lease":{"holder":"a","epoch":2,"ttl_ms":30000}}`)})
	if got, _ := in.Retained(); string(got) != retained {
		t.Fatalf("after starting, an echo replaced the retained state: %q", got)
	}
	if s := <-in.Seen(); s.Seq != 4 {
		t.Fatalf("seen %+v", s)
	}
	over := NewInbox(mqtt.Topics{Prefix: "ota"}, "r1", unsigned, nil)
	over.Receive(mqtt.Message{Topic: "ota/rollouts/r1/state", Oversized: 270000})
	if got, err := over.Retained(); got != nil || err == nil || err.Error() != "state of rollout r1 is 270000 bytes, over the limit of 131072" {
		t.Fatalf("an oversized state read as %q, %v", got, err)
	}
	for i := range commandQueue + 5 { // a flood beyond the queue is dropped, not held
		in.Receive(mqtt.Message{Topic: "ota/rollouts/r1/control", Payload: fmt.Appendf(nil, `{"id":"f%d","op":"resume"}`, i)})
	}
	if c := <-in.Commands(); c.ID != "c1" || c.Op != rollout.OpPause {
		t.Fatalf("first command %+v", c)
	}
	if n := len(in.Commands()); n != commandQueue-1 {
		t.Fatalf("%d more commands queued, want %d", n, commandQueue-1)
	}
}

// fakeFleet is a Fleet whose size and report deadline a test sets.
type fakeFleet struct {
	n   int
	due time.Time
}

func (f *fakeFleet) Len() int              { return f.n }
func (f *fakeFleet) AnswersDue() time.Time { return f.due }

// The view is ready once the answers are due and statuses have had settle
// to arrive and have stopped arriving for a third of it; then it stays so.
func TestObserverReady(t *testing.T) {
	const settle = 3 * time.Second
	tests := []struct {
		name string
		due  time.Duration   // after the start
		adds []time.Duration // when a device is heard of
		at   time.Duration
		want bool
	}{
		{"before settle", 0, nil, 2 * time.Second, false},
		{"settle passed, nothing heard", 0, nil, settle, true},
		{"answers not yet due", 10 * time.Second, nil, 5 * time.Second, false},
		{"answers due", 4 * time.Second, nil, 4 * time.Second, true},
		{"statuses still arriving", 0, []time.Duration{2500 * time.Millisecond}, 3 * time.Second, false},
		{"statuses stopped a third of settle ago", 0, []time.Duration{2 * time.Second}, 3 * time.Second, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			now := t0
			f := &fakeFleet{due: t0.Add(tc.due)}
			o := NewObserver(f, settle, func() time.Time { return now })
			ready := 0
			o.OnReady = func() { ready++ }
			for _, at := range tc.adds {
				now = t0.Add(at)
				f.n++
				o.Ready()
			}
			now = t0.Add(tc.at)
			if got := o.Ready(); got != tc.want || ready != map[bool]int{true: 1}[tc.want] {
				t.Fatalf("ready %v (OnReady %d times), want %v", got, ready, tc.want)
			}
			if tc.want {
				f.n++
				if !o.Ready() || ready != 1 {
					t.Fatalf("a ready view went back or OnReady ran again (%d)", ready)
				}
			}
		})
	}
}

// With a Probe, a quiet spell makes the view ready only once a round trip
// through the broker begun in it comes back with no device heard of
// meanwhile: a broker stalled by a million answers falls silent for
// seconds, and the answers it still holds come after.
func TestObserverProbe(t *testing.T) {
	const settle = 3 * time.Second
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	now := t0.Add(settle)
	f := &fakeFleet{n: 10}
	o := NewObserver(f, settle, func() time.Time { return now })
	started, answer := make(chan struct{}), make(chan error)
	probes := 0
	o.Probe = func() error {
		probes++
		started <- struct{}{}
		return <-answer
	}
	ready := 0
	o.OnReady = func() { ready++ }
	probe := func(err error) {
		t.Helper()
		if o.Ready() {
			t.Fatal("ready before its probe came back")
		}
		<-started
		if o.Ready() {
			t.Fatal("ready while its probe is out")
		}
		answer <- err
		for {
			o.mu.Lock()
			out := o.probing
			o.mu.Unlock()
			if !out {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}

	o.Ready()             // 10 devices heard of at the start
	now = now.Add(settle) // and none since
	probe(nil)
	f.n += 5 // heard of once the broker sent on
	if o.Ready() {
		t.Fatal("ready although devices were heard of during the probe")
	}
	now = now.Add(settle / 3)
	probe(errors.New("sync: nothing arrived for 10s"))
	if o.Ready() {
		t.Fatal("ready after a failed probe")
	}
	probe(nil)
	if !o.Ready() || ready != 1 || probes != 3 {
		t.Fatalf("ready %d times after %d probes, want once after 3", ready, probes)
	}
	f.n++
	if !o.Ready() || probes != 3 {
		t.Fatal("a ready view went back or probed again")
	}
}

// Two controllers started at once (docs/contract/rollouts.md): a state
// delivered after the retained one was read means another controller
// claimed or published meanwhile, and a claim from the older read would
// land after it; the claim does not go out. The retained state delivered
// again (a reconnect) is no change.
func TestDriverStartDoesNotClaimOverAStateSeenMeanwhile(t *testing.T) {
	p := testPlan(5, 1, named(0, "d1"), rollout.Wave{Percent: 100})
	const topic = "ota/rollouts/r1/state"
	released := rollout.NewState(p, t0)
	released.Seq = 7
	released.Lease = &rollout.Lease{Holder: "ctl-a", Epoch: 3, Since: t0.Add(-time.Hour), Renewed: t0.Add(-time.Minute), TTLMS: 30000, Released: t0.Add(-time.Minute)}
	claimA := rollout.NewState(p, t0)
	claimA.Seq = 1
	claimA.Lease = &rollout.Lease{Holder: "ctl-a", Epoch: 1, Since: t0, Renewed: t0, TTLMS: 30000}
	takenA := released
	takenA.Seq = 8
	takenA.Lease = &rollout.Lease{Holder: "ctl-c", Epoch: 4, Since: t0, Renewed: t0, TTLMS: 30000}
	older := released
	older.Seq = 6
	enc := func(s rollout.State) []byte { b, _ := s.Encode(); return b }
	tests := []struct {
		name     string
		retained *rollout.State
		seen     *rollout.State
		err      string
	}{
		{"nothing seen meanwhile", nil, nil, ""},
		{"the retained state again", &released, &released, ""},
		{"an older copy (another broker node's)", &released, &older, ""},
		{"another's claim of a new rollout", nil, &claimA, "rollout state changed while claiming: rollout r1 was published meanwhile by ctl-a (epoch 1, seq 1); not claiming it from the state read before"},
		{"another took the released lease", &released, &takenA, "rollout r1 was published meanwhile by ctl-c (epoch 4, seq 8)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pub := &retain{msgs: map[string][]byte{}}
			seen := make(chan rollout.State, 1)
			if tc.seen != nil {
				seen <- *tc.seen
			}
			var retained []byte
			if tc.retained != nil {
				retained = enc(*tc.retained)
			}
			d := &Driver{Plan: p, Topics: mqtt.Topics{Prefix: "ota"}, Pub: pub, Trust: unsigned, Holder: "ctl-b", Seen: seen, Now: func() time.Time { return t0 }}
			s, _, err := d.Start(context.Background(), retained)
			if tc.err == "" {
				if err != nil || s.Lease.Holder != "ctl-b" || len(pub.msgs[topic]) == 0 {
					t.Fatalf("not claimed: %v, %+v", err, s.Lease)
				}
				return
			}
			if !errors.Is(err, ErrChanged) || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("%v, want %q", err, tc.err)
			}
			if len(pub.msgs) != 0 {
				t.Fatalf("the claim went out: %s", pub.msgs[topic])
			}
		})
	}
}
