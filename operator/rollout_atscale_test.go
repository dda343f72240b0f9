package operator

import (
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/rollout"
)

// The cases at scale, on one stock Mosquitto. 20,000 devices: the
// controller starts (the report request's acknowledgement no longer waits
// behind 20,000 retained statuses), every device is offered once, and the
// retained state stays under 16 KiB. 6,000 devices halted: restarted, the
// controller reads the state (no "no rollout", no fresh state written over
// it), stays halted and offers nothing; status and abort work.
func TestRolloutAtScale(t *testing.T) {
	t.Run("20,000 devices", func(t *testing.T) {
		b, f, ids := scaleFleet(t, 20000, func(string) ota.Result { return ota.ResultSuccess })
		// Paced at 1,000 offers a second: the devices' answers all reach
		// the controller's one connection, whose queue a stock Mosquitto
		// bounds at 1,000 messages (max_queued_messages), and unpaced the
		// controller refuses the plan (docs/brokers.md, a large fleet).
		plan := scalePlan(t, "big", "[[wave]]\npercent = 1\n[[wave]]\npercent = 10\n[[wave]]\npercent = 100\n[rate]\noffers_per_minute = 60000\n", "max_failed_percent = 5\nmin_outcomes = 10\n")
		r := otactl(t, "rollout", "start", "--broker", b.URL, "--settle", "3s", "--tick", "200ms", plan)
		raw, _ := retainedOn(t, b.URL, "ota/rollouts/big/state")
		s, err := openState("ota/rollouts/big/state", []byte(raw))
		if r.code != ota.ExitOK || err != nil || s.Phase != rollout.PhaseFinished || s.Counts.Success != len(ids) {
			t.Fatalf("exit %d, %s %+v (%v)\n%s", r.code, s.Phase, s.Counts, err, tail(r.stderr))
		}
		if len(raw) > rollout.MaxStateSize {
			t.Errorf("the state of %d devices is %d bytes, over %d", len(ids), len(raw), rollout.MaxStateSize)
		}
		t.Logf("state of %d devices: %d bytes", len(ids), len(raw))
		offers := f.Offers()
		for _, id := range ids {
			if offers[id] != 1 {
				t.Fatalf("%s offered %d times\n%s", id, offers[id], tail(r.stderr))
			}
		}
	})
	t.Run("6,000 devices halted, restarted", func(t *testing.T) {
		b, f, ids := scaleFleet(t, 6000, func(id string) ota.Result {
			if id[len(id)-1] == '7' { // one in sixteen
				return ota.ResultRolledBack
			}
			return ota.ResultSuccess
		})
		// Paced: unpaced, 6,000 answers at once are more than a stock
		// Mosquitto queues for the controller, and it refuses the plan
		// (TestRolloutRefusedByTheBrokersQueue).
		plan := scalePlan(t, "halts", "[[wave]]\npercent = 100\n[[wave]]\ndevices = [\"lab-1\"]\n[rate]\noffers_per_minute = 60000\n", "max_failed_percent = 5\nmin_outcomes = 100\n")
		start := []string{"rollout", "start", "--broker", b.URL, "--settle", "3s", "--tick", "200ms", plan}
		r := otactl(t, start...)
		raw, _ := retainedOn(t, b.URL, "ota/rollouts/halts/state")
		s, err := openState("ota/rollouts/halts/state", []byte(raw))
		if r.code != ota.ExitFailure || err != nil || s.Phase != rollout.PhaseHalted {
			t.Fatalf("exit %d, %s (%v)\n%s", r.code, s.Phase, err, tail(r.stderr))
		}
		t.Logf("halted state: %d bytes, %+v", len(raw), s.Counts)
		// The offers the state counts may still be on their way to the fleet.
		settled(t, func() int64 { return f.Offered.Load() }, int64(s.Counts.Devices))
		before := f.Offered.Load()
		r = otactl(t, start...)
		if r.code != ota.ExitFailure || !strings.Contains(r.stderr, "continuing rollout halts from its retained state: halted") {
			t.Fatalf("restart: exit %d\n%s", r.code, tail(r.stderr))
		}
		time.Sleep(500 * time.Millisecond)
		if n := f.Offered.Load() - before; n != 0 {
			t.Errorf("the restarted halted controller offered %d more", n)
		}
		if st := mustRun(t, "rollout", "status", "--broker", b.URL, "halts"); !strings.Contains(st.stdout, "rollout halts: HALTED") {
			t.Errorf("status:\n%s", st.stdout)
		}
		if a := mustRun(t, "rollout", "abort", "--broker", b.URL, "--wait", "1s", "halts"); !strings.Contains(a.stdout, "published abort") {
			t.Errorf("abort:\n%s", a.stdout)
		}
		r = otactl(t, start...)
		again, _ := retainedOn(t, b.URL, "ota/rollouts/halts/state")
		s, _ = openState("ota/rollouts/halts/state", []byte(again))
		if r.code != ota.ExitFailure || s.Phase != rollout.PhaseAborted || f.Offered.Load() != before {
			t.Errorf("after the abort: exit %d, %s, %d more offers\n%s", r.code, s.Phase, f.Offered.Load()-before, tail(r.stderr))
		}
		_ = ids
	})
}

// On a stock Mosquitto (max_queued_messages 1000), a plan that would draw
// more answers at once to the controller than the broker queues for it is
// refused before it publishes anything under the rollout's topics (exit
// 2), naming the setting and the number: an unpaced wave of 1,500 devices
// once the group is seen, before the lease is claimed; a pace over 1,000
// offers a second before connecting. rollout check says the same. Paced
// within the queue, the same fleet is offered.
func TestRolloutRefusedByTheBrokersQueue(t *testing.T) {
	b, f, ids := scaleFleet(t, 1500, func(string) ota.Result { return ota.ResultSuccess })
	published := watchTopics(t, b.URL, "ota/rollouts/queue/#")
	for _, tc := range []struct {
		name, waves string
		need        string
	}{
		{"an unpaced wave", "[[wave]]\npercent = 100\n", "wave 1 (1500 devices, no [rate]) draws up to 1500 answers at once"},
		{"too fast a pace", "[[wave]]\npercent = 100\n[rate]\noffers_per_minute = 90000\n", "lower [rate] max_per_minute to 60000 at most"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := scalePlan(t, "queue", tc.waves, "max_failed_percent = 5\n")
			// rollout check says so beforehand, as start would.
			if r := otactl(t, "rollout", "check", "--broker", b.URL, "--settle", "2s", plan); r.code != ota.ExitUsage || !strings.Contains(r.stderr, tc.need) {
				t.Errorf("check: exit %d, want %d naming %q\n%s%s", r.code, ota.ExitUsage, tc.need, r.stdout, tail(r.stderr))
			}
			r := otactl(t, "rollout", "start", "--broker", b.URL, "--settle", "2s", "--tick", "200ms", plan)
			if r.code != ota.ExitUsage || !strings.Contains(r.stderr, tc.need) || !strings.Contains(r.stderr, "max_queued_messages") {
				t.Fatalf("exit %d, want %d naming %q and max_queued_messages\n%s", r.code, ota.ExitUsage, tc.need, tail(r.stderr))
			}
			if got := published(); len(got) > 0 {
				t.Errorf("published under the rollout's topics: %v", got)
			}
			if raw, ok := retainedOn(t, b.URL, "ota/rollouts/queue/state"); ok {
				t.Errorf("a state was left behind: %.200s", raw)
			}
			if n := f.Offered.Load(); n != 0 {
				t.Errorf("%d offers went out", n)
			}
		})
	}
	// The same plan, paced within the queue, is offered to every device.
	plan := scalePlan(t, "queue", "[[wave]]\npercent = 100\n[rate]\noffers_per_minute = 60000\n", "max_failed_percent = 5\n")
	if r := otactl(t, "rollout", "start", "--broker", b.URL, "--settle", "2s", "--tick", "200ms", plan); r.code != ota.ExitOK {
		t.Fatalf("paced: exit %d\n%s", r.code, tail(r.stderr))
	}
	settled(t, func() int64 { return f.Offered.Load() }, int64(len(ids)))
}

// watchTopics records the topics of every message the broker delivers on
// filter from now on; the func returns them once the broker has delivered
// all it took before the call (a marker through it, sent after, came back).
func watchTopics(t *testing.T, broker, filter string) func() []string {
	t.Helper()
	var (
		mu     sync.Mutex
		topics []string
	)
	marks := make(chan struct{}, 1)
	c := mosquittotest.Client(t, broker, "topic-watch")
	mosquittotest.Subscribe(t, c, filter, func(_ paho.Client, m paho.Message) {
		mu.Lock()
		topics = append(topics, m.Topic())
		mu.Unlock()
	})
	mosquittotest.Subscribe(t, c, "test/watch-mark", func(paho.Client, paho.Message) { marks <- struct{}{} })
	return func() []string {
		t.Helper()
		if tok := c.Publish("test/watch-mark", 1, false, "mark"); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("marker: %v", tok.Error())
		}
		select {
		case <-marks:
		case <-time.After(10 * time.Second):
			t.Fatal("the marker never came back")
		}
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), topics...)
	}
}
