package operator

import (
	"context"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/rollout"
)

// A controller with --state-dir keeps the highest state counter it has
// seen (docs/contract/rollouts.md, a signed control plane): killed with -9
// and started again, it goes on from its own latest retained state; an
// older state, signed by the operator key and published again while no
// controller runs, is refused after the restart, and said.
func TestReplayedStateRefusedAfterRestart(t *testing.T) {
	b, _, _ := scaleFleet(t, 10, func(string) ota.Result { return ota.ResultSuccess })
	const topic = "ota/rollouts/replay/state"
	var (
		mu  sync.Mutex
		raw [][]byte
	)
	c := mosquittotest.Client(t, b.URL, "raw-states")
	mosquittotest.Subscribe(t, c, topic, func(_ paho.Client, m paho.Message) {
		mu.Lock()
		raw = append(raw, append([]byte(nil), m.Payload()...))
		mu.Unlock()
	})
	log := recordStates(t, b.URL)
	plan := scalePlan(t, "replay", "[[wave]]\npercent = 50\nsoak = \"10m\"\n[[wave]]\npercent = 100\n", "max_failed_percent = 5\n")
	args := []string{"rollout", "start", "--broker", b.URL, "--settle", "500ms", "--tick", "100ms", "--lease", "5m", "--state-dir", t.TempDir(), plan}

	first := startOtactl(t, args...)
	waitStates(t, log, "replay", "the first controller soaking", func(s rollout.State) bool { return s.Phase == rollout.PhaseSoaking })
	mu.Lock()
	old := raw[0] // the first state: epoch 1, the lowest counter
	mu.Unlock()
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	first.wait(t, 10*time.Second)

	// Its own latest retained state is no replay: the same counter.
	second := startOtactl(t, args...)
	waitStates(t, log, "replay", "the second controller holding the rollout", func(s rollout.State) bool {
		return s.Lease != nil && s.Lease.Epoch == 2 && s.Phase == rollout.PhaseSoaking
	})
	if err := second.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	second.wait(t, 10*time.Second)
	latest := log.of("replay")[len(log.of("replay"))-1]

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := mqtt.PublishRetained(ctx, mqtt.Config{Broker: b.URL}, topic, old); err != nil {
		t.Fatal(err)
	}
	replayed, err := openState(topic, old)
	if err != nil {
		t.Fatalf("the replayed state is not signed: %v", err)
	}
	third := startOtactl(t, args...)
	if code := third.wait(t, 60*time.Second); code != ota.ExitFailure {
		t.Fatalf("the controller started over a replayed state exited %d, want %d:\n%s", code, ota.ExitFailure, third.out.String())
	}
	// The counter kept is the newest a killed controller read back from
	// the broker (kept on delivery, not on publishing): at most the last
	// published.
	m := regexp.MustCompile(`replayed state on ` + regexp.QuoteMeta(topic) + ` refused: counter (\d+) older than (\d+) seen`).FindStringSubmatch(third.out.String())
	if m == nil {
		t.Fatalf("the refusal is not said:\n%s", third.out.String())
	}
	n, _ := strconv.ParseUint(m[1], 10, 64)
	seenN, _ := strconv.ParseUint(m[2], 10, 64)
	if n != replayed.Counter() || seenN <= n || seenN > latest.Counter() {
		t.Errorf("refused counter %d (want %d) older than %d (want at most %d)", n, replayed.Counter(), seenN, latest.Counter())
	}
	for _, s := range log.of("replay") {
		if s.Lease != nil && s.Lease.Epoch > 2 {
			t.Fatalf("a controller published over the replayed state: %+v", s.Lease)
		}
	}
}
