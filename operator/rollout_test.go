package operator

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/otad/otad/internal/testkit/clitest"
	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/rollout"
)

// protoFleet plays n devices at the protocol level on a real broker: each
// publishes a retained status listing group "fleet", and answers an offer on
// its desired topic with a status whose last_result is that offer's outcome
// (rolled_back for the bad ones). It is the controller under test here; the
// agents' side of an offer is tested with real agents elsewhere.
type protoFleet struct {
	c       paho.Client
	id, sum string // the manifest offered
	bad     func(i int) bool

	mu     sync.Mutex
	offers map[string]int
}

func devName(i int) string { return fmt.Sprintf("gw-%03d", i) }

func startProtoFleet(t *testing.T, broker string, n int, id, sum string, bad func(int) bool) *protoFleet {
	t.Helper()
	f := &protoFleet{id: id, sum: sum, bad: bad, offers: map[string]int{}}
	f.c = mosquittotest.Client(t, broker, "proto-fleet")
	for i := range n {
		f.status(i, `{"id":"rel-old","result":"success"}`, 1).Wait()
	}
	mosquittotest.Subscribe(t, f.c, "ota/devices/+/desired", func(_ paho.Client, m paho.Message) {
		var i int
		if _, err := fmt.Sscanf(m.Topic(), "ota/devices/gw-%03d/desired", &i); err != nil || len(m.Payload()) == 0 {
			return
		}
		f.mu.Lock()
		f.offers[devName(i)]++
		first := f.offers[devName(i)] == 1
		f.mu.Unlock()
		if first { // a device installs an offer once
			r := "success"
			if f.bad(i) {
				r = "rolled_back"
			}
			f.status(i, fmt.Sprintf(`{"id":%q,"sha256":%q,"result":%q}`, f.id, f.sum, r), 2)
		}
	})
	return f
}

func (f *protoFleet) status(i int, last string, seq int) paho.Token {
	st := fmt.Sprintf(`{"device":%q,"seq":%d,"boot_id":"b","state":"idle","booted_slot":"A","groups":["fleet"],"last_result":%s}`,
		devName(i), seq, last)
	return f.c.Publish("ota/devices/"+devName(i)+"/status", 1, true, st)
}

func (f *protoFleet) offered() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.offers)
}

// rolloutPlan writes a plan releasing a real signed envelope.
func rolloutPlan(t *testing.T, name, canarySoak string, maxFailed int) (path, id, sum string) {
	t.Helper()
	env, _ := signedEnvelope(t, "4.2.0", "acme,gw-v2", "https://updates.example.com/rootfs.img")
	m, _ := manifestOf(t, mustReadFile(t, env))
	path = filepath.Join(t.TempDir(), name+".toml")
	plan := fmt.Sprintf(`name = %q
offer = %q
group = "fleet"
[[wave]]
devices = ["gw-001", "gw-002"]
soak = %q
[[wave]]
percent = 10
soak = "1s"
[[wave]]
percent = 100
[halt]
max_failed_percent = %d
min_outcomes = 5
device_timeout = "1m"
`, name, env, canarySoak, maxFailed)
	if err := os.WriteFile(path, []byte(plan), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, m.ID, m.Payload.SHA256
}

func mustReadFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func retainedState(t *testing.T, broker, name string) rollout.State {
	t.Helper()
	raw, ok := retainedOn(t, broker, "ota/rollouts/"+name+"/state")
	s, err := openState("ota/rollouts/"+name+"/state", []byte(raw))
	if !ok || err != nil {
		t.Fatalf("no retained state for %s: %q", name, raw)
	}
	return s
}

// waveMembers are the devices the state's waves hold, among protoFleet's n.
func waveMembers(t *testing.T, plan string, s rollout.State, n int) []string {
	t.Helper()
	p, err := rollout.LoadPlan(plan)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = devName(i)
	}
	out := slices.Concat(rollout.WaveMembers(p, s, ids)...)
	slices.Sort(out)
	return out
}

func keys(m map[string]int) []string { return slices.Sorted(maps.Keys(m)) }

// The scenario at 100 devices: one in five fails its health check;
// the rollout halts in the 10% wave and no device outside its waves is offered.
func TestRolloutHaltsInTheTenPercentWave(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{})
	plan, id, sum := rolloutPlan(t, "halts", "1s", 5)
	f := startProtoFleet(t, b.URL, 100, id, sum, func(i int) bool { return i%5 == 0 })
	start := []string{"rollout", "start", "--broker", b.URL, "--settle", "1s", "--tick", "100ms", plan}

	r := otactl(t, start...)
	if r.code != ota.ExitFailure || !strings.Contains(r.stderr, "rollout halted") {
		t.Fatalf("exit %d, want 1 with a halt\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	s := retainedState(t, b.URL, "halts")
	if s.Phase != rollout.PhaseHalted || s.Wave != 2 || s.Counts.Devices != 10 {
		t.Fatalf("state %s in wave %d with %d devices, want halted in wave 2 with 10", s.Phase, s.Wave, s.Counts.Devices)
	}
	if got, want := keys(f.offered()), waveMembers(t, plan, s, 100); !slices.Equal(got, want) {
		t.Errorf("offered %v, the waves hold %v", got, want)
	}
	if !strings.Contains(r.stdout, "halted in wave 2") || !strings.Contains(r.stdout, "not started") {
		t.Errorf("output lacks the halt and the table:\n%s", r.stdout)
	}

	st := mustRun(t, "rollout", "status", "--broker", b.URL, "halts")
	if !strings.Contains(st.stdout, "rollout halts: HALTED") {
		t.Errorf("status:\n%s", st.stdout)
	}
	// Started again, it stays halted and offers nothing more.
	before := f.offered()
	if r := otactl(t, start...); r.code != ota.ExitFailure || !strings.Contains(r.stderr, "continuing rollout halts") {
		t.Errorf("restart of a halted rollout: exit %d\n%s", r.code, r.stderr)
	}
	time.Sleep(200 * time.Millisecond)
	if after := f.offered(); len(after) != len(before) {
		t.Errorf("a restarted halted controller offered %d more devices", len(after)-len(before))
	}
	// A changed plan under the same name is refused.
	changed := strings.Replace(mustReadFile(t, plan), "max_failed_percent = 5", "max_failed_percent = 50", 1)
	if err := os.WriteFile(plan, []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := otactl(t, start...); r.code != ota.ExitFailure || !strings.Contains(r.stderr, "already exists with another plan") {
		t.Errorf("changed plan: exit %d\n%s", r.code, r.stderr)
	}
}

// No failures: a controller killed mid-rollout and started again finishes
// from the retained state, every device offered exactly once.
func TestRolloutKilledAndRestartedFinishes(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{})
	plan, id, sum := rolloutPlan(t, "restarts", "2s", 5)
	f := startProtoFleet(t, b.URL, 100, id, sum, func(int) bool { return false })
	start := []string{"rollout", "start", "--broker", b.URL, "--settle", "1s", "--tick", "100ms", plan}

	w := watchState(t, b.URL, "restarts")
	ctx, kill := context.WithCancel(context.Background())
	ended := make(chan result, 1)
	go func() {
		var out, errOut strings.Builder
		code := Run(ctx, start, &out, &errOut)
		ended <- result{code, out.String(), errOut.String()}
	}()
	w.wait(t, "the canary soak", func(s rollout.State) bool { return s.Phase == rollout.PhaseSoaking })
	kill()
	<-ended
	if n := len(f.offered()); n != 2 {
		t.Fatalf("%d devices offered when the controller was killed in the canary soak, want 2", n)
	}

	r := otactl(t, start...)
	if r.code != ota.ExitOK || !strings.Contains(r.stderr, "continuing rollout restarts from its retained state: soaking, wave 1") {
		t.Fatalf("restarted: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	s := retainedState(t, b.URL, "restarts")
	if s.Phase != rollout.PhaseFinished || s.Counts.Success != 100 {
		t.Fatalf("state %s, counts %+v", s.Phase, s.Counts)
	}
	for d, n := range f.offered() {
		if n != 1 {
			t.Errorf("%s offered %d times", d, n)
		}
	}
}

// pause holds the next wave, resume lets it go, both through the control
// topic to a running controller.
func TestRolloutPauseAndResume(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{})
	plan, id, sum := rolloutPlan(t, "paused", "2s", 5)
	f := startProtoFleet(t, b.URL, 50, id, sum, func(int) bool { return false })
	w := watchState(t, b.URL, "paused")
	ended := make(chan result, 1)
	go func() {
		var out, errOut strings.Builder
		code := Run(context.Background(), []string{"rollout", "start", "--broker", b.URL, "--settle", "1s", "--tick", "100ms", plan}, &out, &errOut)
		ended <- result{code, out.String(), errOut.String()}
	}()
	w.wait(t, "the canary soak", func(s rollout.State) bool { return s.Phase == rollout.PhaseSoaking })
	if r := mustRun(t, "rollout", "pause", "--broker", b.URL, "--reason", "tickets", "paused"); !strings.Contains(r.stdout, "rollout paused: paused") {
		t.Fatalf("pause: %s", r.stdout)
	}
	time.Sleep(3 * time.Second) // past the soak
	if s, _ := w.now(); s.Wave != 1 || len(f.offered()) != 2 || s.Paused == nil || !strings.Contains(s.Paused.Reason, "tickets") {
		t.Fatalf("paused: wave %d, %d offered, paused %+v", s.Wave, len(f.offered()), s.Paused)
	}
	mustRun(t, "rollout", "resume", "--broker", b.URL, "paused")
	select {
	case r := <-ended:
		if r.code != ota.ExitOK {
			t.Fatalf("controller: exit %d\n%s", r.code, r.stderr)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("controller did not finish after the resume")
	}
	if n := len(f.offered()); n != 50 {
		t.Errorf("%d devices offered, want 50", n)
	}
	if r := otactl(t, "rollout", "abort", "--broker", b.URL, "paused"); r.code != ota.ExitFailure || !strings.Contains(r.stderr, "is finished") {
		t.Errorf("abort of a finished rollout: exit %d %s", r.code, r.stderr)
	}
}

// stateWatch follows a rollout's state topic as a dashboard would.
type stateWatch struct {
	mu     sync.Mutex
	latest *rollout.State
}

func watchState(t *testing.T, broker, name string) *stateWatch {
	t.Helper()
	w := &stateWatch{}
	c := mosquittotest.Client(t, broker, "state-watch-"+name)
	mosquittotest.Subscribe(t, c, "ota/rollouts/"+name+"/state", func(_ paho.Client, m paho.Message) {
		if s, err := openState(m.Topic(), m.Payload()); err == nil {
			w.mu.Lock()
			w.latest = &s
			w.mu.Unlock()
		}
	})
	return w
}

func (w *stateWatch) now() (rollout.State, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.latest == nil {
		return rollout.State{}, false
	}
	return *w.latest, true
}

func (w *stateWatch) wait(t *testing.T, what string, ok func(rollout.State) bool) rollout.State {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if s, found := w.now(); found && ok(s) {
			return s
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the rollout never got to %s", what)
	return rollout.State{}
}

// An operator's mistakes: the plan's errors name the file and the key (and
// nothing is connected to); a NAME no rollout can have is a usage error.
func TestRolloutMistakes(t *testing.T) {
	env, dir := signedEnvelope(t, "4.2.0", "acme,gw-v2", "https://updates.example.com/rootfs.img")
	plan := func(file, name, wave string) string {
		p := filepath.Join(dir, file)
		body := fmt.Sprintf("name = %q\noffer = %q\ngroup = \"fleet\"\n[[wave]]\n%s\n[halt]\nmax_failed_percent = 5\n", name, env, wave)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	typo, dotted, zero := plan("typo.toml", "r1", "percnt = 10"), plan("dotted.toml", "r.1", "percent = 10"), plan("zero.toml", "r1", "percent = 0")
	noBroker := "mqtt://127.0.0.1:1"
	clitest.Run(t, func(args ...string) (int, string, string) {
		r := otactl(t, args...)
		return r.code, r.stdout, r.stderr
	}, []clitest.Case{
		{Args: []string{"rollout", "start", "--broker", noBroker, typo}, Code: ota.ExitFailure, Stderr: "typo.toml: unknown key wave.percnt"},
		{Args: []string{"rollout", "start", "--broker", noBroker, dotted}, Code: ota.ExitFailure, Stderr: `dotted.toml: name: "r.1"`},
		{Args: []string{"rollout", "start", "--broker", noBroker, zero}, Code: ota.ExitFailure, Stderr: "zero.toml: wave[1].percent: 0 is not in (0, 100]"},
		{Args: []string{"rollout", "status", "r1"}, Code: ota.ExitUsage, Stderr: "missing --broker"},
		{Args: []string{"rollout", "status", "--broker", noBroker, "r1"}, Code: ota.ExitFailure, Stderr: "connect to " + noBroker},
		{Args: []string{"rollout", "pause", "--broker", noBroker, "r.1"}, Code: ota.ExitUsage, Stderr: `rollout NAME: not a valid name: "r.1"`},
		{Args: []string{"rollout", "status", "--broker", noBroker, "r+1"}, Code: ota.ExitUsage, Stderr: "rollout NAME"},
	})
}
