package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/ota"
)

func TestDecodeCommand(t *testing.T) {
	tests := []struct {
		in, err string
		want    Command
	}{
		{`{"id":"c1","op":"pause","reason":"tickets","by":"alice","time":"2026-11-29T11:00:00Z"}`, "",
			Command{ID: "c1", Op: OpPause, Reason: "tickets", By: "alice", Time: time.Date(2026, 11, 29, 11, 0, 0, 0, time.UTC)}},
		{`{"id":"c2","op":"abort"}`, "", Command{ID: "c2", Op: OpAbort}},
		{`{"op":"resume"}`, "command without an id", Command{}},
		{`{"id":"c3","op":"restart"}`, `unknown op "restart"`, Command{}},
		{`pause`, "not a command", Command{}},
		{``, "not a command", Command{}},
	}
	for _, tc := range tests {
		got, err := DecodeCommand([]byte(tc.in))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %+v %v, want %+v", tc.in, got, err, tc.want)
		}
	}
	c := NewCommand(OpResume, "fixed", "bob", t0)
	b, err := c.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if again, err := DecodeCommand(b); err != nil || again != c || len(c.ID) != 16 || NewCommand(OpResume, "", "", t0).ID == c.ID {
		t.Fatalf("command %+v round trips as %+v (%v); IDs must be fresh", c, again, err)
	}
}

// Control messages come from the broker: whatever arrives, a command is
// returned only with an ID and a known op.
func FuzzDecodeCommand(f *testing.F) {
	f.Add([]byte(`{"id":"c1","op":"pause","time":"2026-11-29T11:00:00Z"}`))
	f.Add([]byte(`{"id":"","op":"abort"}`))
	f.Add([]byte(`{"id":"c1","op":"pause","time":"x"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeCommand(b)
		if err == nil && (c.ID == "" || !c.Op.Valid()) {
			t.Fatalf("accepted %q as %+v", b, c)
		}
	})
}

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
// another plan's or a state no controller wrote, and otherwise records a
// new state before anything else.
func TestDriverStart(t *testing.T) {
	p := testPlan(5, 1, named(0, "d1"), Wave{Percent: 100})
	const topic = "ota/rollouts/r1/state"
	running, _ := Step(NewState(p, t0), p, Observe{View: view("d1")}, t0)
	enc := func(s State) []byte { b, _ := json.Marshal(s); return b }
	otherPlan := running
	otherPlan.PlanHash = "h2"
	tooFar := running
	tooFar.Wave = 3
	tests := []struct {
		name     string
		retained []byte
		resumed  bool
		err      string
	}{
		{"none retained: a new state, published", nil, false, ""},
		{"its own", enc(running), true, ""},
		{"another plan's", enc(otherPlan), false, "rollout r1 already exists with another plan (hash h2, this plan's h1): a changed plan needs a new name"},
		{"not JSON", []byte("{"), false, "retained state of rollout r1 on " + topic + ": unexpected end of JSON input"},
		{"waves no controller wrote", enc(tooFar), false, "retained state of rollout r1 on " + topic + `: rollout "r1" in wave 3 of 2 with 1 waves recorded`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pub := &retain{msgs: map[string][]byte{}}
			d := &Driver{Plan: p, Topics: mqtt.Topics{Prefix: "ota"}, Pub: pub, Now: func() time.Time { return t0 }}
			s, resumed, err := d.Start(context.Background(), tc.retained)
			if tc.err != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.err) || resumed {
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
			if resumed {
				if s.Wave != 1 || s.Updated != running.Updated || len(pub.msgs) != 0 {
					t.Fatalf("resumed %+v, published %d", s, len(pub.msgs))
				}
				return
			}
			got, err := DecodeState(pub.msgs[topic])
			if err != nil || got.PlanHash != "h1" || got.Phase != PhaseWaiting || s.PlanHash != "h1" {
				t.Fatalf("published %+v (%v)", got, err)
			}
		})
	}
	pub := &retain{msgs: map[string][]byte{}, fail: errors.New("connection lost")}
	d := &Driver{Plan: p, Topics: mqtt.Topics{Prefix: "ota"}, Pub: pub}
	if _, _, err := d.Start(context.Background(), nil); err == nil {
		t.Fatal("a new state that was not published was taken")
	}
}

// A retained state comes from the broker: whatever Start accepts, Step can
// go on from without failing.
func FuzzStart(f *testing.F) {
	p := testPlan(5, 1, named(0, "d1"), Wave{Percent: 100})
	s, _ := Step(NewState(p, t0), p, Observe{View: view("d1")}, t0)
	b, _ := json.Marshal(s)
	f.Add(b)
	f.Add([]byte(`{"name":"r1","plan_hash":"h1","wave_count":2,"wave":1,"waves":[{}]}`))
	f.Add([]byte(`{"name":"r1","plan_hash":"h1","wave_count":2,"wave":2,"waves":[{"devices":{"d1":"timed_out"}},{"ended":"2026-11-29T10:00:00Z"}]}`))
	// A wave past the plan's: Step would index the plan's waves with it.
	f.Add([]byte(`{"name":"r1","plan_hash":"h1","wave_count":2,"wave":3,"waves":[{},{},{"ended":"2026-11-29T10:00:00Z"}],"halted":{}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		d := &Driver{Plan: p, Topics: mqtt.Topics{Prefix: "ota"}, Pub: &retain{msgs: map[string][]byte{}}, Now: func() time.Time { return t0 }}
		s, _, err := d.Start(context.Background(), b)
		if err != nil {
			return
		}
		for i, in := range []Input{Observe{View: view("d1", "d2=failed", "d3=success")}, Offered{Wave: s.Wave}, Command{ID: "x", Op: OpResume}, Observe{View: view("d2")}} {
			s, _ = Step(s, p, in, t0.Add(time.Duration(i)*time.Hour))
		}
	})
}

func TestInbox(t *testing.T) {
	in := NewInbox(mqtt.Topics{Prefix: "ota"}, "r1", nil)
	if got := fmt.Sprint(in.Topics()); got != "map[ota/rollouts/r1/control:1 ota/rollouts/r1/state:1]" {
		t.Fatalf("topics %s", got)
	}
	in.Receive(mqtt.Message{Topic: "ota/rollouts/r1/state", Payload: []byte("retained")})
	in.Receive(mqtt.Message{Topic: "ota/rollouts/r1/control", Payload: []byte(`{"id":"c1","op":"pause"}`)})
	in.Receive(mqtt.Message{Topic: "ota/rollouts/r1/control", Payload: []byte(`{"op":"pause"}`)}) // no id: dropped
	in.Receive(mqtt.Message{Topic: "ota/rollouts/r2/control", Payload: []byte(`{"id":"c9","op":"abort"}`)})
	if got := string(in.Retained()); got != "retained" {
		t.Fatalf("retained %q", got)
	}
	in.Receive(mqtt.Message{Topic: "ota/rollouts/r1/state", Payload: []byte("our own publish")})
	if got := string(in.Retained()); got != "retained" {
		t.Fatalf("after starting, an echo replaced the retained state: %q", got)
	}
	for i := range commandQueue + 5 { // a flood beyond the queue is dropped, not held
		in.Receive(mqtt.Message{Topic: "ota/rollouts/r1/control", Payload: fmt.Appendf(nil, `{"id":"f%d","op":"resume"}`, i)})
	}
	if c := <-in.Commands(); c.ID != "c1" || c.Op != OpPause {
		t.Fatalf("first command %+v", c)
	}
	if n := len(in.Commands()); n != commandQueue-1 {
		t.Fatalf("%d more commands queued, want %d", n, commandQueue-1)
	}
}

// fakeFleet is a Fleet whose devices and report deadline a test sets.
type fakeFleet struct {
	devices map[string]ota.Status
	due     time.Time
}

func (f *fakeFleet) Len() int              { return len(f.devices) }
func (f *fakeFleet) AnswersDue() time.Time { return f.due }
func (f *fakeFleet) Each(fn func(string, ota.Status)) {
	for id, st := range f.devices {
		fn(id, st)
	}
}

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
			f := &fakeFleet{devices: map[string]ota.Status{}, due: t0.Add(tc.due)}
			o := NewObserver(f, settle, func() time.Time { return now })
			ready := 0
			o.OnReady = func() { ready++ }
			for i, at := range tc.adds {
				now = t0.Add(at)
				f.devices[fmt.Sprint("d", i)] = ota.Status{}
				o.View()
			}
			now = t0.Add(tc.at)
			v := o.View()
			if v.Ready != tc.want || len(v.Devices) != len(tc.adds) || ready != map[bool]int{true: 1}[tc.want] {
				t.Fatalf("ready %v with %d devices (OnReady %d times), want %v", v.Ready, len(v.Devices), ready, tc.want)
			}
			if tc.want {
				f.devices["late"] = ota.Status{}
				if v := o.View(); !v.Ready || ready != 1 {
					t.Fatalf("a ready view went back (%v) or OnReady ran again (%d)", v.Ready, ready)
				}
			}
		})
	}
}
