package operator

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/rollout"
	"github.com/otad/otad/verify"
)

// Any client that may publish under ota/rollouts/ used to steer every
// rollout: a state with another holder and a higher epoch stopped the live
// controller (exit 4), a halted one halted it for the next controller, a
// pause paused it. Signed, a running controller ignores each and says so
// (a forged lease, a forged pause, a forged halt signed by a key nobody
// trusts), and finishes; `rollout status` refuses the forged halt left
// retained, and a controller will not start over it.
func TestForgedControlPlaneIsIgnored(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{Quiet: true})
	plan, id, sum := rolloutPlan(t, "forge", "3s", 50)
	startProtoFleet(t, b.URL, 20, id, sum, func(int) bool { return false })
	w := watchState(t, b.URL, "forge")
	ended := make(chan result, 1)
	go func() {
		var out, errOut strings.Builder
		code := Run(context.Background(), []string{"rollout", "start", "--broker", b.URL, "--settle", "1s", "--tick", "100ms", plan}, &out, &errOut)
		ended <- result{code, out.String(), errOut.String()}
	}()
	live := w.wait(t, "the canary soak", func(s rollout.State) bool { return s.Phase == rollout.PhaseSoaking })

	c := mosquittotest.Client(t, b.URL, "mallory")
	const topic = "ota/rollouts/forge/state"
	lease := live
	lease.Lease = &rollout.Lease{Holder: "mallory", Epoch: live.Lease.Epoch + 1, Since: time.Now(), Renewed: time.Now(), TTLMS: 600000}
	lb, _ := lease.Encode()
	c.Publish(topic, 1, true, lb).Wait()
	c.Publish("ota/rollouts/forge/control", 1, true, `{"id":"evil","op":"pause","time":"`+time.Now().UTC().Format(time.RFC3339Nano)+`"}`).Wait()
	other, err := verify.GenerateKey(verify.KeyEd25519)
	if err != nil {
		t.Fatal(err)
	}
	halted := live
	halted.Seq += 1000
	halted.Halted = &rollout.Mark{Time: time.Now(), Reason: "forged halt"}
	hb, _ := halted.Encode()
	hb, err = rollout.Seal(other, topic, halted.Counter(), hb)
	if err != nil {
		t.Fatal(err)
	}
	c.Publish(topic, 1, true, hb).Wait()

	var r result
	select {
	case r = <-ended:
	case <-time.After(60 * time.Second):
		t.Fatal("the controller did not finish")
	}
	if r.code != ota.ExitOK {
		t.Fatalf("controller: exit %d\n%s", r.code, tail(r.stderr))
	}
	for _, want := range []string{
		"forged state on " + topic + " ignored: not signed by a trusted operator key (an unsigned message)",
		"forged state on " + topic + " ignored: not signed by a trusted operator key",
		"forged command on ota/rollouts/forge/control ignored: not signed by a trusted operator key",
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("not reported: %q\n%s", want, tail(r.stderr))
		}
	}
	if s := retainedState(t, b.URL, "forge"); s.Phase != rollout.PhaseFinished || s.Lease.Holder == "mallory" || s.Paused != nil {
		t.Errorf("ended %s, holder %s, paused %v", s.Phase, s.Lease.Holder, s.Paused)
	}

	// The forged halt left retained: status and a controller refuse it.
	c.Publish(topic, 1, true, hb).Wait()
	st := otactl(t, "rollout", "status", "--broker", b.URL, "forge")
	if st.code == ota.ExitOK || !strings.Contains(st.stderr, "forged state on "+topic+" ignored: not signed by a trusted operator key") {
		t.Errorf("status of a forged halt: exit %d\n%s%s", st.code, st.stdout, st.stderr)
	}
	again := otactl(t, "rollout", "start", "--broker", b.URL, "--settle", "1s", "--tick", "100ms", plan)
	if again.code != ota.ExitFailure || !strings.Contains(again.stderr, "not starting over it") || strings.Contains(again.stdout, "HALTED") {
		t.Errorf("start over a forged halt: exit %d\n%s%s", again.code, again.stdout, tail(again.stderr))
	}
}
