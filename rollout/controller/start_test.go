package controller

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/rollout"
)

// A controller refused never connects as the rollout's client ID
// (docs/contract/rollouts.md, the broker fences the old one): six started
// at once on one Mosquitto, one runs the rollout and the five others are
// refused (ErrLeaseHeld), having read and claimed under client IDs of
// their own. The broker accepted the rollout's client ID once and never
// closed a connection of it for another, so the holder was never cut off.
func TestRefusedNeverCutsTheHolderOff(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{}) // connections in its log
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// Two devices that never answer: the rollout waits for them (an hour).
	p := testPlan(5, 1, named(0, "d1", "d2"))
	cfg := Config{MQTT: mqtt.Config{Broker: b.URL}, Plan: p, Settle: 200 * time.Millisecond, Tick: 100 * time.Millisecond,
		Lease: 3 * time.Second, Trust: unsigned}
	const n = 6
	ends := make(chan error, n)
	for range n {
		go func() {
			_, _, err := Run(ctx, cfg)
			ends <- err
		}()
	}
	for range n - 1 {
		select {
		case err := <-ends:
			if !errors.Is(err, rollout.ErrLeaseHeld) {
				t.Fatalf("a controller ended with %v, want it refused (%v)", err, rollout.ErrLeaseHeld)
			}
		case <-ctx.Done():
			t.Fatal("five controllers were not refused in 90s")
		}
	}
	// The holder runs on, renewing its lease (every second).
	select {
	case err := <-ends:
		t.Fatalf("the holder ended: %v", err)
	case <-time.After(2 * time.Second):
	}
	_, s, err := ReadState(ctx, cfg.MQTT, unsigned, p.Name)
	if err != nil || s.Lease == nil || s.Lease.Epoch != 1 {
		t.Errorf("the retained state: lease %+v, %v; want the first epoch's", s.Lease, err)
	}
	cancel()
	<-ends
	b.Stop() // its log whole: mosquitto buffers what it writes to a pipe
	id := ClientID("", p.Name)
	if log := b.Log(); strings.Count(log, " as "+id+" ") != 1 || strings.Contains(log, id+" already connected") {
		t.Errorf("the broker accepted %s %d times (want once), or closed a connection of it for another:\n%s",
			id, strings.Count(log, " as "+id+" "), log)
	}
}

// After its claim was read back as lost, a controller is refused by the
// lease of the claim the broker kept even once it is released (its holder
// may have finished the rollout meanwhile); without a lost claim, a
// released lease is free.
func TestLostClaimRefusedAfterRelease(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{Quiet: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := testPlan(5, 1, named(0, "d1"))
	s := rollout.NewState(p, time.Now())
	s.Lease = &rollout.Lease{Holder: "winner", Epoch: 1, Since: time.Now(), Renewed: time.Now(), Released: time.Now(), TTLMS: 30000}
	topic := mqtt.Topics{}.RolloutState(p.Name)
	cfg := mqtt.Config{Broker: b.URL}
	if err := mqtt.PublishRetained(ctx, cfg, topic, mustSeal(t, nil, topic, s)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		lost bool
		want error
	}{{false, nil}, {true, rollout.ErrLeaseHeld}} {
		_, err := checkLease(ctx, cfg, unsigned, nil, p.Name, "loser", thisProcess(), false, tc.lost, nil)
		if !errors.Is(err, tc.want) || (err != nil && !strings.Contains(err.Error(), "the claim of winner (epoch 1)")) {
			t.Errorf("lost claim %v: %v, want %v", tc.lost, err, tc.want)
		}
	}
}
