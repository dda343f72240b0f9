package sim

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/fleetview"
	"github.com/otad/otad/internal/testkit/clitest"
	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/internal/testkit/signer"
	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/ota"
)

func TestFleetUsage(t *testing.T) {
	clitest.Run(t, otasim, []clitest.Case{
		{Args: []string{"fleet"}, Code: ota.ExitUsage, Stderr: "want --broker, --devices and one of --keys and --root"},
		{Args: []string{"fleet", "--broker", "mqtt://127.0.0.1:1", "--keys", "k"}, Code: ota.ExitUsage, Stderr: "want --broker, --devices and one of --keys and --root"},
		{Args: []string{"fleet", "--broker", "mqtt://127.0.0.1:1", "--keys", "k", "--root", "r.json", "--devices", "3"}, Code: ota.ExitUsage, Stderr: "one of --keys and --root"},
		{Args: []string{"fleet", "--broker", "mqtt://127.0.0.1:1", "--keys", "k", "--devices", "3", "--slot-size", "x"}, Code: ota.ExitUsage, Stderr: "--slot-size"},
	})
	code, _, stderr := otasim("fleet", "--broker", "mqtt://127.0.0.1:1", "--keys", t.TempDir(), "--devices", "3", "--fail-devices", "sim-00009")
	if code != ota.ExitFailure || !strings.Contains(stderr, `"sim-00009" is not one of the fleet's devices`) {
		t.Errorf("unknown failing device: exit %d, %q", code, stderr)
	}
}

// otasim fleet says what it runs, and its devices come up on the broker.
func TestFleetRuns(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{Quiet: true})
	_, keys := signer.Trusted(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	view := fleetview.New("")
	go view.Watch(ctx, mqtt.Config{Broker: b.URL}, nil)
	var out, errOut strings.Builder
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, []string{"fleet", "--broker", b.URL, "--keys", keys, "--devices", "20", "--prefix", "lab-",
			"--group", "lab", "--fail-health", "50", "--max-installs", "4", "--spread", "500ms"}, &out, &errOut)
	}()
	for deadline := time.Now().Add(30 * time.Second); view.Count(func(st ota.Status) bool { return st.State == ota.Idle }) < 20; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("devices not up: %s", view.Tally())
		}
	}
	st, _ := view.Status("lab-00020")
	if st.BootedSlot != ota.SlotA || len(st.Groups) != 1 || st.Groups[0] != "lab" || st.AgentVersion != "otasim" {
		t.Fatalf("status %+v", st)
	}
	cancel()
	if code := <-done; code != ota.ExitOK {
		t.Fatalf("exit %d\n%s\n%s", code, out.String(), errOut.String())
	}
	for _, want := range []string{"RLIMIT_NOFILE", "20 devices lab-00001 to lab-00020 (group lab, compatible otasim)",
		"installs at once: at most 4", "health check fails on ", "connecting over 500ms", "stopped after"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
