package device

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/otad/otad/internal/testkit/devicetest"
	"github.com/otad/otad/ota"
)

func TestProgressLine(t *testing.T) {
	for _, c := range []struct {
		phase       ota.Phase
		done, total int64
		rate        float64
		want        string
	}{
		{ota.Downloading, 0, 3 << 30, 0, "downloading   0%  0 B of 3.0 GiB  -  ETA --:--"},
		{ota.Downloading, 1 << 30, 3 << 30, 32 << 20, "downloading  33%  1.0 GiB of 3.0 GiB  32.0 MiB/s  ETA 1:04"},
		{ota.Verifying, 3 << 30, 3 << 30, 100 << 20, "verifying   100%  3.0 GiB of 3.0 GiB  100.0 MiB/s  ETA 0:00"},
		{ota.Downloading, 1 << 20, 8 << 30, 1 << 20, "downloading   0%  1.0 MiB of 8.0 GiB  1.0 MiB/s  ETA 2:16:31"},
		{ota.Downloading, 5, 0, 0, "downloading   0%  5 B of 0 B  -  ETA --:--"},
	} {
		if got := progressLine(ota.Progress{Phase: c.phase, BytesDone: c.done, BytesTotal: c.total, BytesPerSecond: c.rate}); got != c.want {
			t.Errorf("progressLine(%s, %d, %d, %.0f) =\n%q, want\n%q", c.phase, c.done, c.total, c.rate, got, c.want)
		}
	}
}

// A download waiting for the network says so, on a terminal counting down
// to the next try, elsewhere once a wait.
func TestProgressWaiting(t *testing.T) {
	now := time.Date(2026, 12, 3, 15, 0, 0, 0, time.UTC)
	w := &ota.Waiting{For: ota.WaitNetwork, Error: "dial tcp 10.0.0.1:443: connect: connection refused", Since: now.Add(-65 * time.Second), NextTry: now.Add(40 * time.Second)}
	st := ota.Status{State: ota.Downloading, Target: &ota.TargetStatus{ID: "fw-2", BytesDone: 1 << 20, BytesTotal: 4 << 20, Waiting: w}}
	want := "waiting for the network (1:05): dial tcp 10.0.0.1:443: connect: connection refused; next try in 40s"
	if got := waitLine(*w, now); got != want {
		t.Fatalf("waitLine =\n%q, want\n%q", got, want)
	}
	var tty bytes.Buffer
	p := &progress{w: &tty, tty: true}
	p.update(st, now)
	p.update(st, now.Add(10*time.Second))
	if out := tty.String(); !strings.Contains(out, "\r\x1b[K"+want) || !strings.Contains(out, "next try in 30s") {
		t.Fatalf("terminal: %q", out)
	}
	var plain bytes.Buffer
	p = &progress{w: &plain}
	p.update(st, now)
	p.update(st, now.Add(10*time.Second))
	st.Target.Waiting = nil
	p.update(st, now.Add(20*time.Second))
	if got := strings.Count(plain.String(), "waiting for the network"); got != 1 {
		t.Fatalf("plain output says the wait %d times, want once:\n%s", got, plain.String())
	}
}

// openPTY opens a pseudo-terminal pair: what the child writes to the
// second file, the test reads from the first.
func openPTY(t *testing.T) (master, tty *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	fd := int(m.Fd())
	devicetest.Must(t, unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0)) // unlockpt
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)                       // ptsname
	devicetest.Must(t, err)
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	devicetest.Must(t, err)
	return m, s
}

// installWith runs `otad install` of a slowly served image with its
// stdout and stderr on out, and returns the exit code.
func installWith(t *testing.T, out *os.File, env ...string) int {
	t.Helper()
	tb := devicetest.New(t, devicetest.Options{Policy: "manual"})
	// About 1 MiB/s: the writer's 2 MiB buffers land at 2 s and at 3 s,
	// several status polls apart.
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, err := http.Get(tb.Srv.URL + r.URL.Path)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		img, _ := io.ReadAll(resp.Body)
		w.Header().Set("Content-Length", strconv.Itoa(len(img)))
		for off := 0; off < len(img); off += 64 << 10 {
			if _, err := w.Write(img[off:min(off+64<<10, len(img))]); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			time.Sleep(60 * time.Millisecond)
		}
	}))
	t.Cleanup(slow.Close)
	good, _ := tb.Offer("v2", 2, devicetest.OfferOpts{URL: slow.URL + "/v2"})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, otadBin, "install", "-c", tb.Cfg.Path, writeEnv(t, good))
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(os.Environ(), env...)
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0
}

var percentRE = regexp.MustCompile(`\r\x1b\[Kdownloading +(\d+)%  [^\r]* of [^\r]*  ETA `)

// On a terminal the progress is one line rewritten in place, and its
// percentage grows; the outcome follows on a clean line.
func TestInstallProgressOnTerminal(t *testing.T) {
	master, tty := openPTY(t)
	var got bytes.Buffer
	read := make(chan struct{})
	go func() {
		defer close(read)
		got.ReadFrom(master) // until the last writer closes: EIO
	}()
	code := installWith(t, tty, "TERM=xterm", "JOURNAL_STREAM=")
	tty.Close()
	select {
	case <-read:
	case <-time.After(10 * time.Second):
		t.Fatal("the terminal did not close")
	}
	out := got.String()
	if code != 0 {
		t.Fatalf("exit %d:\n%q", code, out)
	}
	var pcts []int
	for _, m := range percentRE.FindAllStringSubmatch(out, -1) {
		p, _ := strconv.Atoi(m[1])
		pcts = append(pcts, p)
	}
	grew := false
	for i := 1; i < len(pcts); i++ {
		if pcts[i] < pcts[i-1] {
			t.Errorf("percentage went back: %v", pcts)
		}
		grew = grew || pcts[i] > pcts[i-1]
	}
	if len(pcts) < 2 || !grew {
		t.Errorf("want a progress line updated in place with a growing percentage, got %v:\n%q", pcts, out)
	}
	if !strings.Contains(out, "/s  ETA ") {
		t.Errorf("no rate and ETA in the progress:\n%q", out)
	}
	// The line is cleared before the outcome, which ends the output.
	if !regexp.MustCompile(`\r\x1b\[K[^\r\n]*offer\.json: staged rel-v2 [^\r\n]*\r\n$`).MatchString(out) {
		t.Errorf("the outcome does not follow a cleared line:\n%q", out)
	}
}

// On a pipe, and under systemd on a terminal, plain lines at phase changes.
func TestInstallProgressPlain(t *testing.T) {
	for _, c := range []struct {
		name string
		env  []string
		pty  bool
	}{
		{"pipe", nil, false},
		{"journal", []string{"JOURNAL_STREAM=8:1234"}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out *os.File
			var r *os.File
			if c.pty {
				r, out = openPTY(t)
			} else {
				var err error
				r, out, err = os.Pipe()
				devicetest.Must(t, err)
			}
			var got bytes.Buffer
			read := make(chan struct{})
			go func() { defer close(read); got.ReadFrom(r) }()
			code := installWith(t, out, c.env...)
			out.Close()
			<-read
			text := got.String()
			if code != 0 || strings.Contains(text, "\x1b[K") || strings.Contains(strings.ReplaceAll(text, "\r\n", "\n"), "\r") {
				t.Fatalf("exit %d, want plain lines:\n%q", code, text)
			}
			if n := strings.Count(text, ": downloading ("); n != 1 {
				t.Errorf("%d downloading lines, want 1:\n%s", n, text)
			}
			if !strings.Contains(text, "staged rel-v2") {
				t.Errorf("no outcome:\n%s", text)
			}
		})
	}
}
