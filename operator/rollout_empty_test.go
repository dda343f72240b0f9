package operator

import (
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/rollout"
)

// A rollout started on a group no device's status lists says so where
// start says it started, and what happens then: its percent wave waits,
// offering nothing, until a device of the group is seen, and the
// controller keeps running (docs/contract/rollouts.md, rule 1) — not a
// bare "started" with the reason in `rollout status` alone.
func TestRolloutStartOnAnEmptyGroup(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{Quiet: true})
	log := recordStates(t, b.URL)
	plan := scalePlan(t, "empty", "[[wave]]\ndevices = [\"gw-001\"]\n[[wave]]\npercent = 100\n", "max_failed_percent = 5\ndevice_timeout = \"1h\"\n")
	errOut, stop := inBackground("rollout", "start", "--broker", b.URL, "--settle", "500ms", "--tick", "100ms", plan)
	defer stop()
	waitStates(t, log, "empty", "wave 1 offered", func(s rollout.State) bool { return len(s.Waves) == 1 && !s.Waves[0].Offered.IsZero() })
	want := `group g: no device's status lists it (yet): wave 1 offers its 1 named device all the same (one never heard of times out after device_timeout 1h0m0s and counts as failed); ` +
		`wave 2 (100%) and the percent waves after it wait, offering nothing, until a device whose status lists the group is seen; this controller keeps running (state waiting) and starts them then`
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(errOut.String(), want) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	stop()
	if s := errOut.String(); !strings.Contains(s, want) || strings.Index(s, want) < strings.Index(s, "started rollout empty") {
		t.Errorf("start does not say the group is empty and what happens, after it started:\n%s", s)
	}
}
