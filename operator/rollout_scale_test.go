package operator

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/internal/testkit/fakefleet"
	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/internal/testkit/testtool"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/rollout"
)

// scaleFleet is n fake devices in group "g" on a stock Mosquitto: retained
// statuses, answers to report requests, and each offer answered with
// result(id).
func scaleFleet(t *testing.T, n int, result func(id string) ota.Result) (*mosquittotest.Broker, *fakefleet.Fleet, []string) {
	t.Helper()
	b := mosquittotest.Start(t, mosquittotest.Options{Quiet: true})
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%032x", i) // names as long as /etc/machine-id's
	}
	f := fakefleet.Connect(t, b.URL, "")
	f.Groups = []string{"g"}
	f.TakeOffers(result)
	f.Publish(ids)
	f.Answer(ids)
	return b, f, ids
}

// scalePlan writes a plan of name releasing a signed offer to group "g".
func scalePlan(t *testing.T, name, waves, halt string) string {
	t.Helper()
	env, dir := signedEnvelope(t, "4.2.0", "acme,gw-v2", "https://updates.example.com/rootfs.img")
	body := fmt.Sprintf("name = %q\noffer = %q\ngroup = \"g\"\n%s\n[halt]\n%s\n", name, env, waves, halt)
	return testtool.WriteFile(t, filepath.Join(dir, name+".toml"), []byte(body))
}

// The cases at scale, on one stock Mosquitto. 20,000 devices: the
// controller starts (the report request's acknowledgement no longer waits
// behind 20,000 retained statuses), every device is offered once, and the
// retained state stays under 16 KiB. 6,000 devices halted: restarted, the
// controller reads the state (no "no rollout", no fresh state written over
// it), stays halted and offers nothing; status and abort work.
func TestRolloutAtScale(t *testing.T) {
	t.Run("20,000 devices", func(t *testing.T) {
		b, f, ids := scaleFleet(t, 20000, func(string) ota.Result { return ota.ResultSuccess })
		plan := scalePlan(t, "big", "[[wave]]\npercent = 1\n[[wave]]\npercent = 10\n[[wave]]\npercent = 100\n", "max_failed_percent = 5\nmin_outcomes = 10\n")
		r := otactl(t, "rollout", "start", "--broker", b.URL, "--settle", "3s", "--tick", "200ms", plan)
		raw, _ := retainedOn(t, b.URL, "ota/rollouts/big/state")
		s, err := rollout.DecodeState([]byte(raw))
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
		s, err := rollout.DecodeState([]byte(raw))
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
		s, _ = rollout.DecodeState([]byte(again))
		if r.code != ota.ExitFailure || s.Phase != rollout.PhaseAborted || f.Offered.Load() != before {
			t.Errorf("after the abort: exit %d, %s, %d more offers\n%s", r.code, s.Phase, f.Offered.Load()-before, tail(r.stderr))
		}
		_ = ids
	})
}

// A paced wave never exceeds its pace, counted where the offers arrive.
func TestPacedWaveAtTheBroker(t *testing.T) {
	b, f, ids := scaleFleet(t, 150, func(string) ota.Result { return ota.ResultSuccess })
	plan := scalePlan(t, "paced", "[[wave]]\npercent = 100\n[rate]\noffers_per_minute = 600\n", "max_failed_percent = 5\n")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var out, errOut strings.Builder
	code := Run(ctx, []string{"rollout", "start", "--broker", b.URL, "--settle", "1s", "--tick", "100ms", plan}, &out, &errOut)
	if code != ota.ExitOK {
		t.Fatalf("exit %d\n%s", code, tail(errOut.String()))
	}
	at := f.Arrivals()
	if len(at) != len(ids) {
		t.Fatalf("%d offers arrived, want %d", len(at), len(ids))
	}
	// 600 a minute is 10 a second; the bucket holds a second's worth and one.
	for i := range at {
		for j := i; j < len(at); j++ {
			span := at[j].Sub(at[i]).Seconds()
			if allowed := 10*span + 11 + 1; float64(j-i+1) > allowed {
				t.Fatalf("%d offers within %.2f s, the pace allows %.0f", j-i+1, span, allowed)
			}
		}
	}
	took := at[len(at)-1].Sub(at[0])
	t.Logf("%d offers over %v", len(at), took.Round(time.Millisecond))
	if took < 12*time.Second {
		t.Errorf("150 offers at 10 a second went out in %v", took)
	}
}

// settled waits until count reaches at least want and then stays put for
// a second: what was sent has all arrived.
func settled(t *testing.T, count func() int64, want int64) {
	t.Helper()
	last, since := count(), time.Now()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		n := count()
		if n != last {
			last, since = n, time.Now()
		}
		if n >= want && time.Since(since) > time.Second {
			return
		}
	}
	t.Fatalf("%d arrived, want %d", last, want)
}

func tail(s string) string {
	if len(s) > 3000 {
		return "…" + s[len(s)-3000:]
	}
	return s
}
