package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"github.com/otad/otad/rollout"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/otad/otad/mqtt"
)

// broker keeps retained messages like an MQTT broker and plays the fleet:
// an offer on a device's desired topic is that device being offered.
type broker struct {
	mu       sync.Mutex
	retained map[string][]byte
	fleet    *simFleet
	now      func() time.Time
	failNext int // publishes to refuse (a broker gone away)
	// unacked, if set, is asked of each state taken: true keeps the state
	// but fails the publish, as a PUBACK lost to the controller's end.
	unacked func(rollout.State) bool
	// state: the retained state; an offer to a device whose place no
	// started wave's cursor (or batch in flight) covers is one the state
	// does not know of.
	state      *rollout.State
	unrecorded []string
}

// covers reports whether the state has the offer to d on record.
func (b *broker) covers(p *rollout.Plan, d string) bool {
	if b.state == nil {
		return false
	}
	place := rollout.PlaceOf(p.Name, d)
	for _, w := range b.state.Waves {
		for _, c := range []*rollout.Place{w.Cursor, w.Next} {
			if c != nil && place <= *c {
				return true
			}
		}
	}
	return false
}

func (b *broker) PublishRetained(_ context.Context, payload []byte, topics ...string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failNext > 0 {
		b.failNext--
		return errors.New("connection lost")
	}
	for _, t := range topics {
		b.retained[t] = payload
		if strings.HasSuffix(t, "/state") {
			var s rollout.State
			if err := json.Unmarshal(payload, &s); err != nil {
				return err
			}
			b.state = &s
			if b.unacked != nil && b.unacked(s) {
				b.retained[t] = payload
				return context.Canceled
			}
		}
		if dev, leaf, ok := mqtt.DeviceOf("ota", t); ok && leaf == "desired" {
			if !b.covers(driverPlan, dev) {
				b.unrecorded = append(b.unrecorded, dev)
			}
			b.fleet.Offer([]string{dev}, b.now())
		}
	}
	return nil
}

func (b *broker) view(fn func(rollout.View)) {
	b.mu.Lock()
	v := b.fleet.view(driverPlan, b.now())
	b.mu.Unlock()
	fn(v)
}

func (b *broker) retainedState(t *testing.T, name string) rollout.State {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var s rollout.State
	if err := json.Unmarshal(b.retained["ota/rollouts/"+name+"/state"], &s); err != nil {
		t.Fatalf("retained state: %v", err)
	}
	return s
}

// fakeClock advances a minute on every reading: a rollout of hours runs in
// milliseconds.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Minute)
	return c.t
}

func (c *fakeClock) peek() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func newWorld(badEvery int) (*broker, *fakeClock) {
	clk := &fakeClock{t: t0}
	b := &broker{retained: map[string][]byte{}, fleet: newSimFleet(200, badEvery), now: clk.peek}
	return b, clk
}

func driver(p *rollout.Plan, b *broker, clk *fakeClock, cmds chan rollout.Command) *Driver {
	return &Driver{Plan: p, Topics: mqtt.Topics{Prefix: "ota"}, Pub: b, Trust: unsigned, Fleet: b.view, Commands: cmds, Tick: time.Millisecond, Now: clk.now, Holder: "test"}
}

var driverPlan = testPlan(5, 10, named(30*time.Minute, "gw-0001", "gw-0002"), rollout.Wave{Percent: 10, Soak: time.Hour}, rollout.Wave{Percent: 100})

func TestDriverFinishes(t *testing.T) {
	b, clk := newWorld(0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := driver(driverPlan, b, clk, nil).Run(ctx, rollout.NewState(driverPlan, t0))
	if err != nil || s.Phase != rollout.PhaseFinished || s.Counts.Success != 200 {
		t.Fatalf("run: %v, %s %+v", err, s.Phase, s.Counts)
	}
	if got := b.retainedState(t, "r1"); got.Phase != rollout.PhaseFinished || got.Updated != s.Updated {
		t.Errorf("retained state %s, returned %s", got.Phase, s.Phase)
	}
	if !bytes.Equal(b.retained["ota/devices/gw-0150/desired"], driverPlan.Offer.Envelope) {
		t.Error("no retained offer on a device's desired topic")
	}
	for d, n := range b.fleet.Offers {
		if n != 1 {
			t.Errorf("%s offered %d times", d, n)
		}
	}
}

func TestDriverHalts(t *testing.T) {
	b, clk := newWorld(5)
	s, err := driver(driverPlan, b, clk, nil).Run(context.Background(), rollout.NewState(driverPlan, t0))
	if !errors.Is(err, ErrHalted) || s.Wave != 2 || len(b.fleet.Offered) != 20 {
		t.Fatalf("run: %v in wave %d, %d devices offered; want halted in wave 2 with 20", err, s.Wave, len(b.fleet.Offered))
	}
	// Started again from the retained state alone it stays halted...
	again, err := driver(driverPlan, b, clk, nil).Run(context.Background(), b.retainedState(t, "r1"))
	if !errors.Is(err, ErrHalted) || len(b.fleet.Offered) != 20 {
		t.Fatalf("restart: %v, %d offered", err, len(b.fleet.Offered))
	}
	// ...until an operator's resume, retained on the control topic, waits for it.
	cmds := make(chan rollout.Command, 1)
	cmds <- rollout.Command{ID: "c1", Op: rollout.OpResume, By: "op"}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err = driver(driverPlan, b, clk, cmds).Run(ctx, again)
	if !errors.Is(err, ErrHalted) || s.Wave != 3 || s.Accepted == 0 || len(b.fleet.Offered) != 200 {
		t.Fatalf("after resume: %v in wave %d (accepted %d), %d offered; want wave 3 offered, halted again", err, s.Wave, s.Accepted, len(b.fleet.Offered))
	}
}

// A controller killed at any moment and started again from the retained
// state alone comes to the same end, offering each device once.
func TestDriverKilledAndRestarted(t *testing.T) {
	for _, bad := range []int{0, 5} {
		b, clk := newWorld(bad)
		s := rollout.NewState(driverPlan, t0)
		var err error
		for kills := 0; ; kills++ {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Millisecond)
			_, err = driver(driverPlan, b, clk, nil).Run(ctx, s)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Logf("bad every %d: ended after %d kills", bad, kills)
				break
			}
			if _, ok := b.retained["ota/rollouts/r1/state"]; ok {
				s = b.retainedState(t, "r1") // the retained state alone
			}
		}
		ref, refClk := newWorld(bad)
		want, wantErr := driver(driverPlan, ref, refClk, nil).Run(context.Background(), rollout.NewState(driverPlan, t0))
		got := b.retainedState(t, "r1")
		if (err == nil) != (wantErr == nil) || got.Phase != want.Phase || got.Wave != want.Wave || got.Counts != want.Counts {
			t.Errorf("bad every %d: killed %s wave %d %+v (%v); straight %s wave %d %+v (%v)", bad,
				got.Phase, got.Wave, got.Counts, err, want.Phase, want.Wave, want.Counts, wantErr)
		}
		for d, n := range b.fleet.Offers {
			if n != 1 {
				t.Errorf("bad every %d: %s offered %d times", bad, d, n)
			}
		}
	}
}

// A state the broker did not take is not adopted: no offer goes out to a
// device the retained state does not name.
func TestDriverStateFirst(t *testing.T) {
	for _, bad := range []int{0, 5} {
		b, clk := newWorld(bad)
		b.failNext = 3
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		s, err := driver(driverPlan, b, clk, nil).Run(ctx, rollout.NewState(driverPlan, t0))
		cancel()
		if (bad == 0 && err != nil) || (bad != 0 && !errors.Is(err, ErrHalted)) {
			t.Fatalf("run: %v %s", err, s.Phase)
		}
		if len(b.unrecorded) > 0 || len(b.fleet.Offered) == 0 {
			t.Errorf("%d devices offered, %d of them before the retained state named them", len(b.fleet.Offered), len(b.unrecorded))
		}
	}
}

// A state the broker took whose acknowledgement the controller did not wait
// for (stopped meanwhile) is what the release goes on from: releasing the
// state before it would take the rollout back (TestRolloutKilledAndRestartedFinishes
// once found "running, wave 1" retained after its soak had been published).
func TestDriverReleasesFromTheStateSent(t *testing.T) {
	b, clk := newWorld(0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	once := false
	b.unacked = func(s rollout.State) bool {
		if s.Phase != rollout.PhaseSoaking || once {
			return false
		}
		once = true
		cancel()
		return true
	}
	d := driver(driverPlan, b, clk, nil)
	d.TTL = time.Hour
	s, _, err := d.Start(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.Run(ctx, s)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("run: %v", err)
	}
	got := b.retainedState(t, "r1")
	if got.Phase != rollout.PhaseSoaking || got.Lease == nil || got.Lease.Released.IsZero() {
		t.Fatalf("retained %s (lease %+v), want soaking and released", got.Phase, got.Lease)
	}
}
