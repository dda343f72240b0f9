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
	key, trust := operatorKey(t)
	seal := func(topic string, s rollout.State) []byte {
		b, _ := s.Encode()
		b, err := rollout.Seal(key, topic, s.Counter(), b)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	ob, nb := seal("ota/rollouts/r1/state", older), seal("ota/rollouts/r1/state", newer)
	put(a.URL, "ota/rollouts/r1/state", ob)
	put(b.URL, "ota/rollouts/r1/state", nb)
	_, s, err := ReadState(ctx, mqtt.Config{Brokers: []string{a.URL, b.URL}}, trust, "r1")
	if err != nil || s.Lease.Epoch != 2 {
		t.Fatalf("read %+v %v, want the epoch 2 copy", s.Lease, err)
	}
	if _, _, err := ReadState(ctx, mqtt.Config{Broker: a.URL}, trust, "none"); !errors.Is(err, ErrNoState) {
		t.Errorf("no state: %v", err)
	}
	put(a.URL, "ota/rollouts/big/state", []byte(`{"name":"big","history":[{"event":"`+strings.Repeat("x", 200000)+`"}]}`))
	if _, _, err := ReadState(ctx, mqtt.Config{Broker: a.URL}, trust, "big"); err == nil || !strings.Contains(err.Error(), "state of rollout big is 200") ||
		!strings.Contains(err.Error(), "over the limit of 131072") {
		t.Errorf("an oversized state: %v", err)
	}
	// A state no trusted key signed is absent, and said.
	forged := newer
	forged.Name, forged.Lease = "r2", &rollout.Lease{Holder: "mallory", Epoch: 99, TTLMS: 30000}
	fb, _ := forged.Encode()
	put(a.URL, "ota/rollouts/r2/state", fb)
	if _, _, err := ReadState(ctx, mqtt.Config{Broker: a.URL}, trust, "r2"); !errors.Is(err, ErrNoState) || !errors.Is(err, rollout.ErrForged) ||
		!strings.Contains(err.Error(), "forged state on ota/rollouts/r2/state ignored: not signed by a trusted operator key") {
		t.Errorf("a forged state: %v", err)
	}
	rec := func(id, body string) []byte {
		b, err := rollout.Seal(key, "ota/rollouts/r1/devices/"+id, 1, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	put(a.URL, "ota/rollouts/r1/devices/d1", rec("d1", `{"device":"d1","wave":1,"kept":"success"}`))
	put(a.URL, "ota/rollouts/r1/devices/d2", rec("d2", `{"device":"d2","wave":1,"accepted":"timed_out"}`))
	put(a.URL, "ota/rollouts/r1/devices/d3", []byte(`{"device":"d3","wave":1,"accepted":"failed"}`)) // unsigned: not a record
	recs, err := ReadRecords(ctx, mqtt.Config{Broker: a.URL}, trust, "r1")
	if err != nil || len(recs) != 2 || recs["d2"].Accepted != rollout.TimedOut {
		t.Errorf("records %+v %v", recs, err)
	}
}
