package operator

import (
	"strings"
	"testing"
	"time"

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
		// Paced at 1,000 offers a second: the fake fleet takes all 20,000
		// devices' offers on one connection, whose queue a stock Mosquitto
		// bounds at 1,000 messages (max_queued_messages); real devices each
		// have their own (docs/brokers.md, a large fleet).
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
				t.Fatalf("%s offered %d times", id, offers[id])
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
		plan := scalePlan(t, "halts", "[[wave]]\npercent = 100\n[[wave]]\ndevices = [\"lab-1\"]\n", "max_failed_percent = 5\nmin_outcomes = 100\n")
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
