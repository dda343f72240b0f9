package operator

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/internal/testkit/testtool"
	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/rollout"
	"github.com/otad/otad/rollout/controller"
)

// helperArgs makes the test binary act as otactl (TestHelperOtactl).
const helperArgs = "OTACTL_HELPER_ARGS"

// TestHelperOtactl is not a test: run as a process of its own by the
// lease tests, it is `otactl ARGS`, and exits with its code. SIGTERM
// interrupts it as it does otactl.
func TestHelperOtactl(t *testing.T) {
	raw := os.Getenv(helperArgs)
	if raw == "" {
		return
	}
	var args []string
	if err := json.Unmarshal([]byte(raw), &args); err != nil {
		t.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	code := Run(ctx, args, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// controllerProc is an otactl process.
type controllerProc struct {
	cmd  *exec.Cmd
	out  testtool.Buffer
	done chan struct{}
	code int
}

func startOtactl(t *testing.T, args ...string) *controllerProc {
	t.Helper()
	b, _ := json.Marshal(args)
	p := &controllerProc{cmd: exec.Command(os.Args[0], "-test.run=^TestHelperOtactl$"), done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), helperArgs+"="+string(b))
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		close(p.done)
	}()
	t.Cleanup(func() { _ = p.cmd.Process.Kill(); <-p.done })
	return p
}

func (p *controllerProc) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(d):
		t.Fatalf("otactl did not exit within %v:\n%s", d, p.out.String())
		return -1
	}
}

// stateLog records, in the order the broker delivers them, who published
// each state of every rollout.
type stateLog struct {
	mu      sync.Mutex
	states  map[string][]rollout.State
	largest map[string]int // bytes of the largest state seen
}

func recordStates(t *testing.T, broker string) *stateLog {
	t.Helper()
	l := &stateLog{states: map[string][]rollout.State{}, largest: map[string]int{}}
	c := mosquittotest.Client(t, broker, "state-log")
	mosquittotest.Subscribe(t, c, "ota/rollouts/+/state", func(_ paho.Client, m paho.Message) {
		s, err := openState(m.Topic(), m.Payload())
		if err != nil {
			return
		}
		l.mu.Lock()
		l.states[s.Name] = append(l.states[s.Name], s)
		l.largest[s.Name] = max(l.largest[s.Name], len(m.Payload()))
		l.mu.Unlock()
	})
	return l
}

func (l *stateLog) of(name string) []rollout.State {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]rollout.State(nil), l.states[name]...)
}

// holders are the lease holders of name's states in order, each run of
// one holder once: "a b" is a takeover; "a b a" two controllers publishing.
// A claim passed over as stale (stale) is not a run.
func (l *stateLog) holders(name string) []string {
	out, _ := l.runs(name)
	return out
}

// runs are holders, and the claims every reader passes over as stale
// (rollout.StaleClaim; docs/contract/rollouts.md, two started at once).
func (l *stateLog) runs(name string) (holders []string, stale []rollout.State) {
	var last *rollout.State
	for _, s := range l.of(name) {
		if s.Lease == nil {
			continue
		}
		if last != nil && rollout.StaleClaim(*last, s) {
			stale = append(stale, s)
			continue
		}
		if n := len(holders); n == 0 || holders[n-1] != s.Lease.Holder {
			holders = append(holders, s.Lease.Holder)
		}
		last = &s
	}
	return holders, stale
}

// neverTwo fails when two controllers' states interleave, or an epoch goes
// back. A stale claim (runs) is what a controller publishes before it
// learns of the other (docs/contract/rollouts.md, two started at once):
// its holder then publishes nothing more.
func neverTwo(t *testing.T, l *stateLog, name string) {
	t.Helper()
	holders, stale := l.runs(name)
	seen := map[string]bool{}
	for _, h := range holders {
		if seen[h] {
			t.Fatalf("rollout %s: %s published again after another controller did: %v", name, h, holders)
		}
		seen[h] = true
	}
	claimed := map[string]bool{}
	for _, s := range stale {
		if seen[s.Lease.Holder] || claimed[s.Lease.Holder] || !s.Lease.Since.Equal(s.Lease.Renewed) {
			t.Fatalf("rollout %s: %s published more than its claim, which was passed over as stale: %v, stale %+v", name, s.Lease.Holder, holders, s.Lease)
		}
		claimed[s.Lease.Holder] = true
		t.Logf("rollout %s: a stale claim of %s (epoch %d, seq %d) passed over", name, s.Lease.Holder, s.Lease.Epoch, s.Seq)
	}
	var epoch uint64
	for _, s := range l.of(name) {
		if s.Lease != nil && s.Lease.Epoch < epoch {
			t.Fatalf("rollout %s: epoch %d after %d", name, s.Lease.Epoch, epoch)
		}
		if s.Lease != nil {
			epoch = s.Lease.Epoch
		}
	}
}

// Two controllers of one rollout started at the same moment, 20 times:
// never do both publish; one runs the rollout to its end, the other is
// refused (exit 4) or, once the first has ended, finds it ended. Never do
// both stop: two claims read back as lost while starting are read again,
// and the broker kept one of them. The one that runs it is never cut off.
func TestTwoControllersAtOnce(t *testing.T) {
	b, f, ids := scaleFleet(t, 30, func(string) ota.Result { return ota.ResultSuccess })
	log := recordStates(t, b.URL)
	codes := map[[2]int]int{}
	for i := range 20 {
		name := fmt.Sprintf("duo%02d", i)
		plan := scalePlan(t, name, "[[wave]]\npercent = 20\n[[wave]]\npercent = 100\n", "max_failed_percent = 5\n")
		args := []string{"rollout", "start", "--broker", b.URL, "--settle", "300ms", "--tick", "100ms", "--lease", "5s", plan}
		a, c := startOtactl(t, args...), startOtactl(t, args...)
		ca, cc := a.wait(t, 60*time.Second), c.wait(t, 60*time.Second)
		if !(ca == ota.ExitOK || cc == ota.ExitOK) || (ca != ota.ExitOK && ca != ota.ExitBusy) || (cc != ota.ExitOK && cc != ota.ExitBusy) {
			t.Fatalf("%s: exits %d and %d, want one 0 and the other 0 or 4\n--- a:\n%s\n--- b:\n%s", name, ca, cc, tail(a.out.String()), tail(c.out.String()))
		}
		codes[[2]int{min(ca, cc), max(ca, cc)}]++
		neverTwo(t, log, name)
		states := log.of(name)
		last := states[len(states)-1]
		if last.Phase != rollout.PhaseFinished || last.Counts.Success != len(ids) {
			t.Fatalf("%s ended %s %+v", name, last.Phase, last.Counts)
		}
		// A controller connects as the rollout's client ID only once its
		// claim is read back, so the one that ran the rollout was never
		// cut off by the other (a claim that lost after being read back
		// may be: the later claim's controller takes over).
		for _, p := range []*controllerProc{a, c} {
			if strings.Contains(last.Lease.Holder, fmt.Sprintf(" pid %d ", p.cmd.Process.Pid)) && strings.Contains(p.out.String(), "connection lost") {
				t.Fatalf("%s: the controller that ran it was cut off:\n%s", name, tail(p.out.String()))
			}
		}
	}
	t.Logf("exit codes of the pairs: %v", codes)
	for _, id := range ids {
		if n := f.Offers()[id]; n < 1 {
			t.Errorf("%s never offered", id)
		}
	}
}

// A live controller is never cut off by those refused beside it
// (docs/contract/rollouts.md, the broker fences the old one): six started
// at the same moment, one holds the rollout and the five others are
// refused (exit 4), having read and claimed under client IDs of their own.
// The broker accepted a connection with the rollout's client ID once, and
// the holder never lost one.
func TestRefusedControllersLeaveTheHolderAlone(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{}) // connections in its log
	fleetOn(t, b, 20, func(string) ota.Result { return ota.ResultSuccess })
	log := recordStates(t, b.URL)
	plan := scalePlan(t, "alone", "[[wave]]\npercent = 50\nsoak = \"1h\"\n[[wave]]\npercent = 100\n", "max_failed_percent = 5\n")
	args := []string{"rollout", "start", "--broker", b.URL, "--settle", "300ms", "--tick", "100ms", "--lease", "3s", plan}
	procs := make([]*controllerProc, 6)
	for i := range procs {
		procs[i] = startOtactl(t, args...)
	}
	var holder *controllerProc
	deadline := time.After(90 * time.Second)
	for refused := 0; refused < len(procs)-1; {
		select {
		case <-deadline:
			t.Fatalf("%d of the 5 refused in 90s", refused)
		case <-time.After(100 * time.Millisecond):
		}
		refused, holder = 0, nil
		for _, p := range procs {
			select {
			case <-p.done:
				if p.code != ota.ExitBusy {
					t.Fatalf("a controller exited %d, want 4:\n%s", p.code, tail(p.out.String()))
				}
				refused++
			default:
				holder = p
			}
		}
	}
	if holder == nil {
		t.Fatal("every controller was refused")
	}
	waitStates(t, log, "alone", "the holder soaking", func(s rollout.State) bool { return s.Phase == rollout.PhaseSoaking })
	time.Sleep(2 * time.Second) // a few renewals more
	neverTwo(t, log, "alone")
	// Two claims at the same moment may both be published; the broker keeps
	// the later one and its earlier claimer is refused (docs/contract/
	// rollouts.md, "two started at once"). So the running controller's claim
	// is the last one, and neverTwo holds that nobody published after it.
	hs := log.holders("alone")
	if len(hs) == 0 || !strings.Contains(hs[len(hs)-1], fmt.Sprintf(" pid %d ", holder.cmd.Process.Pid)) {
		t.Errorf("holders %v, want the running controller's (pid %d) last", hs, holder.cmd.Process.Pid)
	}
	if out := holder.out.String(); strings.Contains(out, "connection lost") || strings.Contains(out, "reconnected") {
		t.Errorf("the holder was cut off:\n%s", tail(out))
	}
	_ = holder.cmd.Process.Signal(syscall.SIGTERM)
	holder.wait(t, 20*time.Second)
	b.Stop() // its log whole: mosquitto buffers what it writes to a pipe
	id := controller.ClientID(mqtt.DefaultTopicPrefix, "alone")
	if n := strings.Count(b.Log(), " as "+id+" "); n != 1 || strings.Contains(b.Log(), id+" already connected") {
		t.Errorf("the broker accepted %s %d times (want once), or closed an old connection of it:\n%s", id, n, b.Log())
	}
}

// A controller frozen (SIGSTOP) past its lease while another takes the
// rollout over publishes nothing when woken (SIGCONT) and exits 4; the
// other goes on, and pause from another process reaches it.
func TestFrozenControllerStops(t *testing.T) {
	b, _, _ := scaleFleet(t, 20, func(string) ota.Result { return ota.ResultSuccess })
	log := recordStates(t, b.URL)
	plan := scalePlan(t, "frozen", "[[wave]]\npercent = 50\nsoak = \"1h\"\n[[wave]]\npercent = 100\n", "max_failed_percent = 5\n")
	// A lease of 5 s, not the least (3 s): on a loaded machine the first
	// may, as it should, stop on its own for a renewal it could not make
	// in time, before it is frozen.
	args := []string{"rollout", "start", "--broker", b.URL, "--settle", "500ms", "--tick", "100ms", "--lease", "5s", plan}
	first := startOtactl(t, args...)
	waitStates(t, log, "frozen", "the first controller soaking", func(s rollout.State) bool { return s.Phase == rollout.PhaseSoaking })
	holderA := log.of("frozen")[len(log.of("frozen"))-1].Lease.Holder
	if err := first.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("%v:\n%s", err, tail(first.out.String()))
	}
	time.Sleep(6 * time.Second) // past its lease
	second := startOtactl(t, args...)
	waitStates(t, log, "frozen", "the second controller holding the lease", func(s rollout.State) bool {
		return s.Lease != nil && s.Lease.Holder != holderA && s.Lease.Epoch == 2
	})
	if err := first.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatalf("%v:\n%s", err, tail(first.out.String()))
	}
	if code := first.wait(t, 20*time.Second); code != ota.ExitBusy {
		t.Fatalf("the woken controller exited %d, want 4:\n%s", code, first.out.String())
	}
	time.Sleep(time.Second) // anything it would still send
	neverTwo(t, log, "frozen")
	if hs := log.holders("frozen"); len(hs) != 2 || hs[0] != holderA {
		t.Fatalf("holders %v", hs)
	}
	// The second goes on; an operator's pause from elsewhere reaches it.
	if r := mustRun(t, "rollout", "pause", "--broker", b.URL, "--wait", "10s", "frozen"); !strings.Contains(r.stdout, "rollout frozen: paused") {
		t.Errorf("pause: %s", r.stdout)
	}
	// A third, started while the second holds the lease, is refused.
	third := startOtactl(t, args...)
	if code := third.wait(t, 20*time.Second); code != ota.ExitBusy || !strings.Contains(third.out.String(), "is held by") {
		t.Errorf("a third controller: exit %d\n%s", code, third.out.String())
	}
	_ = second.cmd.Process.Signal(syscall.SIGTERM)
	second.wait(t, 20*time.Second)
	neverTwo(t, log, "frozen")
}

func waitStates(t *testing.T, l *stateLog, name, what string, ok func(rollout.State) bool) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		ss := l.of(name)
		if len(ss) > 0 && ok(ss[len(ss)-1]) {
			return
		}
	}
	t.Fatalf("rollout %s never got to %s", name, what)
}
