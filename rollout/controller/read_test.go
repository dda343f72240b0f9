package controller

import (
	"context"
	"errors"
	"github.com/otad/otad/rollout"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/mqtt"
)

// ReadState reads every broker and keeps the newest copy (a node that
// kept an older one does not mislead); a state over the read limit is an
// error naming its size, never "no rollout"; ReadRecords gives the
// per-device records.
func TestReadState(t *testing.T) {
	a, b := mosquittotest.Start(t, mosquittotest.Options{Quiet: true}), mosquittotest.Start(t, mosquittotest.Options{Quiet: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := testPlan(5, 1, rollout.Wave{Percent: 100})
	older, newer := rollout.NewState(p, t0), rollout.NewState(p, t0)
	older.Seq, newer.Seq = 7, 8
	newer.Lease = &rollout.Lease{Holder: "x", Epoch: 2, TTLMS: 30000}
	older.Lease = &rollout.Lease{Holder: "y", Epoch: 1, TTLMS: 30000}
	older.Seq = 90 // a higher seq under an older epoch is older
	put := func(u, topic string, payload []byte) {
		if err := mqtt.PublishRetained(ctx, mqtt.Config{Broker: u}, topic, payload); err != nil {
			t.Fatal(err)
		}
	}
	ob, _ := older.Encode()
	nb, _ := newer.Encode()
	put(a.URL, "ota/rollouts/r1/state", ob)
	put(b.URL, "ota/rollouts/r1/state", nb)
	_, s, err := ReadState(ctx, mqtt.Config{Brokers: []string{a.URL, b.URL}}, "r1")
	if err != nil || s.Lease.Epoch != 2 {
		t.Fatalf("read %+v %v, want the epoch 2 copy", s.Lease, err)
	}
	if _, _, err := ReadState(ctx, mqtt.Config{Broker: a.URL}, "none"); !errors.Is(err, ErrNoState) {
		t.Errorf("no state: %v", err)
	}
	put(a.URL, "ota/rollouts/big/state", []byte(`{"name":"big","history":[{"event":"`+strings.Repeat("x", 200000)+`"}]}`))
	if _, _, err := ReadState(ctx, mqtt.Config{Broker: a.URL}, "big"); err == nil || !strings.Contains(err.Error(), "state of rollout big is 200") ||
		!strings.Contains(err.Error(), "over the limit of 131072") {
		t.Errorf("an oversized state: %v", err)
	}
	put(a.URL, "ota/rollouts/r1/devices/d1", []byte(`{"device":"d1","wave":1,"kept":"success"}`))
	put(a.URL, "ota/rollouts/r1/devices/d2", []byte(`{"device":"d2","wave":1,"accepted":"timed_out"}`))
	recs, err := ReadRecords(ctx, mqtt.Config{Broker: a.URL}, "r1")
	if err != nil || len(recs) != 2 || recs["d2"].Accepted != rollout.TimedOut {
		t.Errorf("records %+v %v", recs, err)
	}
}
