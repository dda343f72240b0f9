package operator

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/internal/testkit/testtool"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/rollout"
)

// One rollout per group (docs/contract/rollouts.md): a second rollout of a
// group whose first a controller runs now is refused (exit 4), naming the
// first and who runs it, and publishes nothing (rollout check says start
// would refuse it); once that controller has
// stopped, the second starts and warns that the first would offer again
// if started again.
func TestOneRolloutPerGroup(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{Quiet: true})
	log := recordStates(t, b.URL)
	waves, halt := "[[wave]]\ndevices = [\"gw-001\"]\n", "max_failed_percent = 5\ndevice_timeout = \"1h\"\n"
	first, second := scalePlan(t, "first", waves, halt), scalePlan(t, "second", waves, halt)

	_, stop1 := inBackground("rollout", "start", "--broker", b.URL, "--settle", "500ms", "--tick", "100ms", first)
	defer stop1()
	waitStates(t, log, "first", "wave 1 offered", func(s rollout.State) bool { return len(s.Waves) == 1 && !s.Waves[0].Offered.IsZero() })

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out, errOut testtool.Buffer
	if code := Run(ctx, []string{"rollout", "start", "--broker", b.URL, "--settle", "500ms", second}, &out, &errOut); code != ota.ExitBusy {
		t.Fatalf("second rollout of the group while the first runs: exit %d, want %d\n%s", code, ota.ExitBusy, errOut.String())
	}
	for _, want := range []string{"group in another rollout: rollout second: group g is in rollout first (", "runs now", "otactl rollout abort"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("refusal does not say %q:\n%s", want, errOut.String())
		}
	}
	var checkOut, checkErr testtool.Buffer
	if code := Run(ctx, []string{"rollout", "check", "--broker", b.URL, "--settle", "500ms", second}, &checkOut, &checkErr); code != ota.ExitUsage ||
		!strings.Contains(checkErr.String(), "group g is in rollout first (") || !strings.Contains(checkErr.String(), "start would refuse it") {
		t.Errorf("rollout check of the second while the first runs: exit %d, want %d saying start would refuse it\n%s%s", code, ota.ExitUsage, checkOut.String(), checkErr.String())
	}
	if n := len(log.of("second")); n != 0 {
		t.Errorf("the refused rollout published %d states", n)
	}

	stop1() // Ctrl-C: the first's controller releases its lease
	err2, stop2 := inBackground("rollout", "start", "--broker", b.URL, "--settle", "500ms", "--tick", "100ms", second)
	defer stop2()
	waitStates(t, log, "second", "wave 1 offered", func(s rollout.State) bool { return len(s.Waves) == 1 && !s.Waves[0].Offered.IsZero() })
	stop2()
	want := "rollout second: group g is also in rollout first (running, wave 1 of 1, offer "
	if s := err2.String(); !strings.Contains(s, want) || !strings.Contains(s, "which no controller runs now") || !strings.Contains(s, "started rollout second") {
		t.Errorf("the second rollout, started once no controller runs the first, does not warn of it:\n%s", s)
	}
}

// inBackground runs otactl with args until stop is called, which cancels
// it (Ctrl-C) and waits for it to return; errOut is its stderr so far.
func inBackground(args ...string) (errOut *testtool.Buffer, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var out testtool.Buffer
	errOut = new(testtool.Buffer)
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(ctx, args, &out, errOut)
	}()
	return errOut, func() {
		cancel()
		<-done
	}
}
