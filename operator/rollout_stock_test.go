package operator

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/otad/otad/internal/testkit/fakefleet"
	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/internal/testkit/rabbitmqtest"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/rollout"
)

// A rollout over 20,000 fake devices on one broker at its stock limits —
// Mosquitto 2.0 (max_queued_messages 1000, max_inflight_messages 20: its
// config sets a listener and where its files go, no limit) and RabbitMQ's
// MQTT plugin (its config sets the listeners): two controllers started 2 s
// apart, one runs and the other exits 4; the live one killed with -9
// mid-wave and started again at once finishes; every device is offered,
// the offers never run ahead of the plan's pace, and the state stays under
// 16 KiB.
func TestRolloutOnStockBrokers(t *testing.T) {
	if testing.Short() {
		t.Skip("20,000 devices on two brokers: minutes")
	}
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) (url string, log func() string)
	}{
		{"Mosquitto", func(t *testing.T) (string, func() string) {
			// Notices: the broker says when it drops messages for a client.
			b := mosquittotest.Start(t, mosquittotest.Options{Quiet: true, Extra: []string{"log_type notice"}})
			return b.URL, b.Log
		}},
		{"RabbitMQ", func(t *testing.T) (string, func() string) {
			b := rabbitmqtest.Start(t, rabbitmqtest.Options{})
			return b.URL, b.Log
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url, log := tc.start(t)
			stockRollout(t, url, log)
		})
	}
}

func stockRollout(t *testing.T, broker string, brokerLog func() string) {
	const n, perMinute = 20000, 60000
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%032x", i)
	}
	f := fakefleet.Connect(t, broker, "")
	f.Groups = []string{"g"}
	f.TakeOffers(func(string) ota.Result { return ota.ResultSuccess })
	f.Publish(ids)
	f.Answer(ids)
	log := recordStates(t, broker)
	plan := scalePlan(t, "stock", fmt.Sprintf("[[wave]]\npercent = 100\n[rate]\noffers_per_minute = %d\n", perMinute), "max_failed_percent = 5\nmin_outcomes = 100\n")
	args := []string{"rollout", "start", "--broker", broker, "--settle", "3s", "--tick", "200ms", "--lease", "5m", plan}

	// Either may win the lease: the second's connection, under the same
	// client ID, cuts off the first's, which dials again.
	live, busy := startOtactl(t, args...), (*controllerProc)(nil)
	time.Sleep(2 * time.Second)
	other := startOtactl(t, args...)
	select {
	case <-live.done:
		live, busy = other, live
	case <-other.done:
		busy = other
	case <-time.After(90 * time.Second):
		t.Fatalf("neither controller exited\n%s\n--- the second:\n%s", head(live.out.String()), head(other.out.String()))
	}
	if code := busy.wait(t, time.Second); code != ota.ExitBusy {
		t.Fatalf("a controller exited %d, want %d (busy)\n%s\n--- the other:\n%s", code, ota.ExitBusy, head(busy.out.String()), head(live.out.String()))
	}
	settledAt := func(k int64) {
		for deadline := time.Now().Add(2 * time.Minute); f.Offered.Load() < k; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d offers arrived, waiting for %d\n%s", f.Offered.Load(), k, tail(live.out.String()))
			}
		}
	}
	settledAt(n / 4)
	killed := time.Now()
	if err := live.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	live.wait(t, 10*time.Second)
	again := startOtactl(t, args...)
	if code := again.wait(t, 3*time.Minute); code != ota.ExitOK {
		t.Fatalf("the controller started again exited %d\n%s", code, tail(again.out.String()))
	}
	neverTwo(t, log, "stock")
	states := log.of("stock")
	if last := states[len(states)-1]; last.Phase != rollout.PhaseFinished || last.Counts.Success != n {
		t.Fatalf("ended %s %+v", last.Phase, last.Counts)
	}
	if big := log.largest["stock"]; big > rollout.MaxStateSize {
		t.Errorf("a state of %d bytes, over %d", big, rollout.MaxStateSize)
	}
	offers := f.Offers()
	for _, id := range ids {
		if offers[id] < 1 {
			t.Fatalf("%s never offered (%d of %d offered)", id, len(offers), n)
		}
	}
	at := f.Arrivals()
	if worst, i := aheadOfPace(states[len(states)-1].Waves[0].Started, at, perMinute); worst > 0 {
		t.Errorf("the offers ran %d ahead of %d a minute, from offer %d of %d, %v after the kill\n%s", worst, perMinute, i, len(at), at[i].Sub(killed), head(again.out.String()))
	}
	dropped := strings.Count(brokerLog(), "Outgoing messages are being dropped")
	t.Logf("%d offers (%d devices) over %v; largest state %d bytes; the broker dropped messages %d times:\n%s",
		len(at), len(offers), at[len(at)-1].Sub(at[0]).Round(time.Millisecond), log.largest["stock"], dropped, droppedLines(brokerLog()))
}

// aheadOfPace is by how many offers, at worst, the arrivals at (in order)
// ran ahead of what perMinute allows from the wave's start: the pace's
// integral and the bucket (a second's worth and one). Measured where the
// offers arrive, as bench/rollout does: a bunch the broker forwards late
// is not taken for offers sent ahead.
func aheadOfPace(start time.Time, at []time.Time, perMinute float64) (worst, from int) {
	rate := perMinute / 60
	for i, a := range at {
		allowed := rate*a.Sub(start).Seconds() + rate + 1
		if over := float64(i+1) - allowed; over > float64(worst) {
			worst, from = int(over), i
		}
	}
	return worst, from
}

func droppedLines(log string) string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "dropped") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func head(s string) string { return s[:min(len(s), 4000)] }
