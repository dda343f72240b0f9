package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/rollout"
)

// A step over a large fleet may take most of the lease on a loaded
// machine (18 s over a million devices): the lease due is renewed before
// the batch it chose goes out, which then has its whole window; a batch
// whose window has passed does not start (offered unbounded, it ran a
// 30 s lease out in the benchmark).
func TestOffersAfterASlowStep(t *testing.T) {
	p := testPlan(5, 1, named(0, "d1", "d2"))
	now := t0
	pub := &retain{msgs: map[string][]byte{}}
	d := &Driver{Plan: p, Topics: mqtt.Topics{Prefix: "ota"}, Pub: pub, Trust: unsigned, Holder: "me", TTL: 30 * time.Second,
		Now: func() time.Time { return now }}
	s, _, err := d.Start(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	offer := rollout.Offer{Wave: 1, Devices: []string{"d1", "d2"}}
	topic := mqtt.Topics{Prefix: "ota", Device: "d1"}.Desired()

	// 25 s after the renewal: past the batch's window (two thirds of the
	// TTL), the lease still live.
	now = t0.Add(25 * time.Second)
	if n, err := d.offerInTime(context.Background(), s, offer); n != 0 || err == nil || !strings.Contains(err.Error(), "due for renewal") {
		t.Errorf("an offer past its window: %d out, %v", n, err)
	}
	if _, ok := pub.msgs[topic]; ok {
		t.Error("an offer went out past its window")
	}
	// Renewed first, the batch goes out.
	renewed := d.fresh(context.Background(), s)
	if got := renewed.Lease.Renewed; !got.Equal(now) || !renewed.RenewedHere().Equal(now) {
		t.Fatalf("renewed at %v, want %v", got, now)
	}
	if retained := pub.msgs[d.Topics.RolloutState(p.Name)]; !strings.Contains(string(retained), now.Format(time.RFC3339)) {
		t.Errorf("the renewal was not published: %s", retained)
	}
	if n, err := d.offerInTime(context.Background(), renewed, offer); n != 2 || err != nil {
		t.Errorf("after the renewal: %d out, %v", n, err)
	}
	// Not due: nothing is published.
	now = now.Add(time.Second)
	delete(pub.msgs, d.Topics.RolloutState(p.Name))
	if again := d.fresh(context.Background(), renewed); !again.RenewedHere().Equal(renewed.RenewedHere()) || len(pub.msgs[d.Topics.RolloutState(p.Name)]) > 0 {
		t.Error("renewed again a second after")
	}
}
