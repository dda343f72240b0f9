package dashboard

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/fleetview"
	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/rollout"
	"github.com/otad/otad/rollout/seen"
)

// With counters kept (--state-dir), a dashboard started again refuses an
// older state of a rollout it showed, published while it was down, and
// shows the latest delivered again.
func TestRolloutsRememberAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	brokers := []string{"mqtt://b:1883"}
	state := func(seq int) mqtt.Message {
		return mqtt.Message{Topic: "ota/rollouts/r1/state", Payload: fmt.Appendf(nil,
			`{"name":"r1","state":"running","wave_count":2,"waves":[],"seq":%d,"lease":{"holder":"c","epoch":3,"ttl_ms":30000}}`, seq)}
	}
	start := func() (*Rollouts, *bytes.Buffer) {
		counters, err := seen.Open(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		var logged bytes.Buffer
		r := NewRollouts("ota", rollout.Trust{Unsigned: true}, slog.New(slog.NewTextHandler(&logged, nil)))
		r.Remember(counters, brokers)
		return r, &logged
	}
	r, _ := start()
	if !r.Observe(state(4)) || !r.Observe(state(6)) {
		t.Fatal("states not taken")
	}
	r, logged := start()
	if r.Observe(state(5)) {
		t.Error("an older state taken after a restart")
	}
	if v := r.Views(fleetview.New("ota"), time.Now()); len(v) != 0 {
		t.Errorf("an older state shown after a restart: %+v", v)
	}
	want := "replayed state on ota/rollouts/r1/state refused: counter 12884901893 older than 12884901894 seen"
	if !strings.Contains(logged.String(), want) {
		t.Errorf("not reported: %q\n%s", want, logged.String())
	}
	if !r.Observe(state(6)) {
		t.Error("the latest state, delivered again, refused")
	}
}
