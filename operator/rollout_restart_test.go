package operator

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/otad/otad/ota"
	"github.com/otad/otad/rollout"
)

// A controller killed with -9 mid-rollout and started again at once (no
// --take-over) proves its predecessor gone — same host and boot, its pid
// not running — and finishes the rollout without waiting out the lease
// (five minutes here: the test waits a minute).
func TestKilledControllerRestartsAtOnce(t *testing.T) {
	b, f, ids := scaleFleet(t, 20, func(string) ota.Result { return ota.ResultSuccess })
	log := recordStates(t, b.URL)
	plan := scalePlan(t, "phoenix", "[[wave]]\npercent = 50\nsoak = \"2s\"\n[[wave]]\npercent = 100\n", "max_failed_percent = 5\n")
	args := []string{"rollout", "start", "--broker", b.URL, "--settle", "500ms", "--tick", "100ms", "--lease", "5m", plan}
	first := startOtactl(t, args...)
	waitStates(t, log, "phoenix", "the first controller soaking", func(s rollout.State) bool { return s.Phase == rollout.PhaseSoaking })
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	first.wait(t, 10*time.Second)
	held := log.of("phoenix")[len(log.of("phoenix"))-1].Lease
	if held.PID != first.cmd.Process.Pid || held.Host == "" || held.BootID == "" {
		t.Fatalf("the lease does not say where its holder runs: %+v (pid %d)", held, first.cmd.Process.Pid)
	}
	second := startOtactl(t, args...)
	if code := second.wait(t, 60*time.Second); code != ota.ExitOK {
		t.Fatalf("the controller started again exited %d:\n%s", code, second.out.String())
	}
	if out := second.out.String(); !strings.Contains(out, "is gone (pid ") || !strings.Contains(out, "taking the rollout over at once") {
		t.Errorf("it does not say why it took over:\n%s", out)
	}
	neverTwo(t, log, "phoenix")
	states := log.of("phoenix")
	if last := states[len(states)-1]; last.Phase != rollout.PhaseFinished || last.Counts.Success != len(ids) || last.Lease.Epoch != 2 {
		t.Fatalf("ended %s %+v, epoch %d", last.Phase, last.Counts, last.Lease.Epoch)
	}
	for _, id := range ids {
		if f.Offers()[id] < 1 {
			t.Errorf("%s never offered", id)
		}
	}
}
