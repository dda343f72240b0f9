package operator

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/internal/testkit/testtool"
	"github.com/otad/otad/rollout"
)

// `rollout status --watch` of a rollout no controller runs says so, once,
// with when its lease expired or was released — also when the lease
// expires while it watches, with no state published — and keeps watching.
func TestRolloutWatchSaysNoControllerRunsIt(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{Quiet: true})
	c := mosquittotest.Client(t, b.URL, "states")
	now := time.Now()
	for _, s := range []rollout.State{
		{Name: "expiring", Phase: rollout.PhaseRunning, Group: "g", Offer: rollout.Ref{ID: "rel-a"}, Wave: 1, WaveCount: 2, Seq: 3,
			Lease: &rollout.Lease{Holder: "alice@ops-1 pid 4242 3fa2c1", Epoch: 1, Since: now.Add(-time.Minute), Renewed: now, TTLMS: 3000}},
		{Name: "released", Phase: rollout.PhaseHalted, Group: "g", Offer: rollout.Ref{ID: "rel-a"}, Wave: 1, WaveCount: 2, Seq: 3,
			Halted: &rollout.Mark{Time: now, Reason: "too many failed"},
			Lease:  &rollout.Lease{Holder: "bob@ops-2 pid 7 1a2b3c", Epoch: 2, Since: now.Add(-time.Hour), Renewed: now, TTLMS: 30000, Released: now}},
	} {
		topic := "ota/rollouts/" + s.Name + "/state"
		if tok := c.Publish(topic, 1, true, sealState(t, topic, s)); !tok.Wait() || tok.Error() != nil {
			t.Fatal(tok.Error())
		}
	}
	for name, want := range map[string]string{
		"expiring": "no controller runs rollout expiring: the lease of alice@ops-1 pid 4242 3fa2c1 (epoch 1) expired " + now.Add(3*time.Second).Local().Format(time.DateTime),
		"released": "no controller runs rollout released: bob@ops-2 pid 7 1a2b3c (epoch 2) released its lease " + now.Local().Format(time.DateTime),
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var out, errOut testtool.Buffer
		start := time.Now()
		code := Run(ctx, []string{"rollout", "status", "--broker", b.URL, "--watch", name}, &out, &errOut)
		cancel()
		if code != 0 || time.Since(start) < 4500*time.Millisecond {
			t.Errorf("%s: the watch ended (exit %d) after %v:\n%s", name, code, time.Since(start), errOut.String())
		}
		if n := strings.Count(out.String(), want); n != 1 {
			t.Errorf("%s: %q said %d times, want once:\n%s", name, want, n, out.String())
		}
		if !strings.Contains(out.String(), "nothing moves until otactl rollout start with its plan takes it over") {
			t.Errorf("%s: no hint of what takes it over:\n%s", name, out.String())
		}
	}
}
