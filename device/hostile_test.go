package device

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/otad/otad/internal/testkit/devicetest"
	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/internal/testkit/testtool"
	"github.com/otad/otad/ota"
)

// supervisor runs `otad run` as systemd would: started again whenever it
// exits (a sim reboot ends the process), until Stop. It records the peak RSS
// (VmHWM) of every process it ran.
type supervisor struct {
	t      *testing.T
	cfg    string
	Log    testtool.Buffer
	mu     sync.Mutex
	cmd    *exec.Cmd
	starts int
	hwm    int64 // KiB
	stop   chan struct{}
	done   chan struct{}
}

func supervise(t *testing.T, cfg string) *supervisor {
	s := &supervisor{t: t, cfg: cfg, stop: make(chan struct{}), done: make(chan struct{})}
	go s.loop()
	t.Cleanup(s.Stop)
	return s
}

func (s *supervisor) loop() {
	defer close(s.done)
	for {
		cmd := exec.Command(otadBin, "run", "-c", s.cfg)
		cmd.Stderr = &s.Log
		if err := cmd.Start(); err != nil {
			s.t.Error(err)
			return
		}
		s.mu.Lock()
		s.cmd = cmd
		s.starts++
		s.mu.Unlock()
		exited := make(chan struct{})
		go s.watchRSS(cmd.Process.Pid, exited)
		cmd.Wait()
		close(exited)
		select {
		case <-s.stop:
			return
		default:
		}
		time.Sleep(50 * time.Millisecond) // RestartSec, shortened
	}
}

// watchRSS samples the process's VmHWM (its peak RSS so far) until it exits.
func (s *supervisor) watchRSS(pid int, exited <-chan struct{}) {
	for {
		if kb := vmHWM(pid); kb > 0 {
			s.mu.Lock()
			s.hwm = max(s.hwm, kb)
			s.mu.Unlock()
		}
		select {
		case <-exited:
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func vmHWM(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

// Restart stops the running otad with SIGTERM; the loop starts it again.
func (s *supervisor) Restart() {
	s.mu.Lock()
	cmd, n := s.cmd, s.starts
	s.mu.Unlock()
	cmd.Process.Signal(syscall.SIGTERM)
	for i := 0; ; i++ {
		s.mu.Lock()
		started := s.starts > n
		s.mu.Unlock()
		if started {
			return
		}
		if i > 1000 {
			s.t.Fatal("otad was not started again")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (s *supervisor) Stop() {
	select {
	case <-s.stop:
		return
	default:
	}
	close(s.stop)
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd != nil {
		cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-s.done
	}
}

func (s *supervisor) PeakRSS() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hwm
}

// status reads `otad status --json` (through the daemon, or the journal).
func status(t *testing.T, cfg string) (ota.Status, bool) {
	code, out, _ := otad(t, "status", "--json", "-c", cfg)
	var st ota.Status
	return st, code == 0 && json.Unmarshal([]byte(out), &st) == nil
}

func waitFor(t *testing.T, what string, timeout time.Duration, s *supervisor, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s\n%s", what, s.Log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func pub(t *testing.T, b *mosquittotest.Broker, topic string, payload []byte) {
	t.Helper()
	bin := mosquittotest.Require(t, "mosquitto_pub", "mosquitto-clients")
	f := filepath.Join(t.TempDir(), "payload")
	devicetest.Must(t, os.WriteFile(f, payload, 0o600))
	if out, err := exec.Command(bin, "-p", strconv.Itoa(b.Port), "-h", "127.0.0.1", "-q", "1", "-r", "-t", topic, "-f", f).CombinedOutput(); err != nil {
		t.Fatalf("mosquitto_pub: %v: %s", err, out)
	}
}

// Issue 9 end to end: image X fails its health check and rolls back; then a
// garbage message on a group topic, an older retained offer, and three
// restarts of `otad run`: X is downloaded once in all, and the status still
// says failed for X, with the refusals in last_refusal.
func TestFailedImageStaysFailed(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{})
	tb := devicetest.New(t, devicetest.Options{Broker: b.URL, Groups: []string{"canary", "eu"}, Window: "1s",
		Health: []string{"/bin/sh", "-c", "echo unhealthy; exit 1"}})
	cfg := tb.Cfg.Path
	now := time.Now().UTC()
	x, xsum := tb.Offer("x", 2, devicetest.OfferOpts{Issued: now.Add(-time.Minute)})
	older, _ := tb.Offer("older", 3, devicetest.OfferOpts{Issued: now.Add(-time.Hour)})
	pub(t, b, "ota/devices/gw-0001/desired", x)
	s := supervise(t, cfg)
	failedX := func() bool {
		st, ok := status(t, cfg)
		return ok && st.State == ota.Idle && st.BootedSlot == "A" && st.LastResult != nil &&
			st.LastResult.Result == ota.ResultFailed && st.LastResult.SHA256 == xsum
	}
	waitFor(t, "X to fail its health check and roll back", 90*time.Second, s, failedX)

	pub(t, b, "ota/groups/canary/desired", []byte("}garbage{"))
	pub(t, b, "ota/groups/eu/desired", older)
	for i := range 3 {
		time.Sleep(time.Second) // the retained burst arrives and settles
		s.Restart()
		waitFor(t, fmt.Sprintf("otad up again after restart %d", i+1), 30*time.Second, s, func() bool {
			st, ok := status(t, cfg)
			return ok && st.LastRefusal != nil
		})
	}
	time.Sleep(2 * time.Second)
	if n := tb.Hits("x"); n != 1 {
		t.Fatalf("X was downloaded %d times, want once\n%s", n, s.Log.String())
	}
	if !failedX() {
		st, _ := status(t, cfg)
		t.Fatalf("status %s booted %s last_result %+v, want failed for X", st.State, st.BootedSlot, st.LastResult)
	}
	st, _ := status(t, cfg)
	if r := st.LastRefusal; r == nil || (r.Code != ota.CodeStale && r.Code != ota.CodeBadEnvelope) || r.Time.IsZero() {
		t.Fatalf("last_refusal %+v, want the stale offer or the garbage", st.LastRefusal)
	}
	if !strings.Contains(strings.Join(st.Groups, ","), "canary") {
		t.Fatalf("status groups %v", st.Groups)
	}
}

// Issue 9 (3): a 100 MB retained message on the desired topic costs the real
// daemon no more than a small one; it logs the drop and installs a valid
// offer sent after it.
func TestHugeRetainedMessage(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{})
	tb := devicetest.New(t, devicetest.Options{Broker: b.URL, Policy: "manual"})
	cfg := tb.Cfg.Path
	pub(t, b, "ota/devices/gw-0001/desired", bytes.Repeat([]byte("A"), 100<<20))
	s := supervise(t, cfg)
	waitFor(t, "the drop to be logged", 60*time.Second, s, func() bool {
		return strings.Contains(s.Log.String(), "oversized message dropped unread")
	})
	for _, l := range strings.Split(s.Log.String(), "\n") {
		if strings.Contains(l, "oversized message dropped unread") {
			t.Log(l)
		}
	}
	env, sum := tb.Offer("v2", 2, devicetest.OfferOpts{})
	pub(t, b, "ota/devices/gw-0001/desired", env)
	waitFor(t, "the valid offer installed", 60*time.Second, s, func() bool {
		st, ok := status(t, cfg)
		return ok && st.State == ota.Staged && st.Slots["B"].SHA256 == sum // manual policy: staged (issue 27)
	})
	s.Stop()
	peak := s.PeakRSS()
	t.Logf("peak RSS (VmHWM) of otad run: %d KiB", peak)
	if peak <= 0 || peak > 48<<10 {
		t.Fatalf("peak RSS %d KiB, want under 48 MiB", peak)
	}
}
