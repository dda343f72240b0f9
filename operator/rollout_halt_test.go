package operator

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/ota"
	"github.com/otad/otad/rollout"
)

// A canary wave that halts while two of its devices still install: the
// controller stays on until they are in, then exits 1 naming the failed
// device, its code and what to run next; the state holds the outcome of
// every device offered. abort --withdraw then leaves none of the
// rollout's offers retained on the broker.
func TestRolloutHaltRecordsAndWithdraws(t *testing.T) {
	if testing.Short() {
		t.Skip("30 agents")
	}
	slow := map[string]time.Duration{"sim-00001": 6 * time.Second, "sim-00003": 6 * time.Second}
	d := startDashFleet(t, 30, slow)
	r := d.fleetUp(t)
	state := watchState(t, d.broker.URL, "dash")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res := make(chan result, 1)
	go func() {
		res <- runCtx(ctx, "rollout", "start", "--broker", d.broker.URL, "--settle", "2s", "--tick", "200ms", d.plan)
	}()
	halted := state.wait(t, "halted", func(s rollout.State) bool { return s.Phase == rollout.PhaseHalted })
	if halted.Counts.Pending == 0 {
		t.Fatalf("no device was still installing at the halt: %+v", halted.Counts)
	}
	var out result
	select {
	case out = <-res:
	case <-time.After(90 * time.Second):
		t.Fatal("the controller did not end after the offered devices' outcomes")
	}
	if out.code != ota.ExitFailure {
		t.Fatalf("exit %d\n%s\n%s", out.code, out.stdout, out.stderr)
	}
	final := retainedState(t, d.broker.URL, "dash")
	if c := final.Counts; c.Devices != 3 || c.Pending != 0 || c.Success != 2 || c.Failed != 1 {
		t.Errorf("the state after the halt counts %+v, want 3 devices: 2 success, 1 failed, none pending", c)
	}
	for _, re := range []string{
		`(?m)^rollout dash HALTED: 1 of 1 devices with an outcome failed`,
		`(?m)^every one of the 3 devices offered has an outcome: 1 failed`,
		`(?m)^  sim-00002\s+failed\s+health_check_failed\s+health check failed`,
		`(?m)^  otactl rollout resume --broker mqtt://\S+ dash\s+# accept`,
		`(?m)^  otactl rollout abort --withdraw --broker mqtt://\S+ dash\s+# stop for good`,
	} {
		if !regexp.MustCompile(re).MatchString(out.stdout) {
			t.Errorf("no /%s/ in the output:\n%s", re, out.stdout)
		}
	}
	if !strings.Contains(out.stderr, "recording the outcomes of the devices already offered") {
		t.Errorf("the controller did not say it stays on:\n%s", out.stderr)
	}

	// Withdraw: the offers retained on the canaries' desired topics go.
	for _, id := range []string{"sim-00001", "sim-00002", "sim-00003"} {
		if _, ok := retainedOn(t, d.broker.URL, "ota/devices/"+id+"/desired"); !ok {
			t.Fatalf("%s has no retained offer before the withdraw", id)
		}
	}
	w := mustRun(t, "rollout", "abort", "--withdraw", "--wait", "1s", "--window", "1s", "--broker", d.broker.URL, "dash")
	if !strings.Contains(w.stdout, "cleared it from the desired topics of 3 devices") {
		t.Errorf("abort --withdraw: %s", w.stdout)
	}
	for _, id := range r {
		if got, ok := retainedOn(t, d.broker.URL, "ota/devices/"+id+"/desired"); ok {
			t.Errorf("%s still holds an offer (%d bytes)", id, len(got))
		}
	}
	// Again: nothing of the rollout's is left to clear.
	if w := mustRun(t, "rollout", "abort", "--withdraw", "--wait", "1s", "--window", "1s", "--broker", d.broker.URL, "dash"); !strings.Contains(w.stdout, "of 0 devices") {
		t.Errorf("withdraw again: %s", w.stdout)
	}
}
