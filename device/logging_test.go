package device

import (
	"bufio"
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/otad/otad/bootctl/grub"
	"github.com/otad/otad/internal/testkit/devicetest"
)

func TestJournalPriorities(t *testing.T) {
	var b bytes.Buffer
	log := newLogger(&b, slog.LevelDebug, true).With("device", "gw-1")
	log.Debug("d", "k", 1)
	log.Info("i")
	log.Warn("w", "err", "multi\nline")
	log.WithGroup("g").Error("e", "x", 2)
	want := []string{`<7>level=DEBUG msg=d device=gw-1 k=1`, `<6>level=INFO msg=i device=gw-1`,
		`<4>level=WARN msg=w device=gw-1 err="multi\nline"`, `<3>level=ERROR msg=e device=gw-1 g.x=2`}
	if got := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("journal lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	b.Reset()
	newLogger(&b, slog.LevelInfo, false).Warn("w")
	if !strings.HasPrefix(b.String(), "time=") {
		t.Errorf("off the journal: %q, want key=value lines with the time", b.String())
	}
	if got := atPriority(true, slog.LevelError, "otad: one\n  two\n"); got != "<3>otad: one\n<3>  two\n" {
		t.Errorf("atPriority: %q", got)
	}
	if got := atPriority(false, slog.LevelError, "otad: one\n"); got != "otad: one\n" {
		t.Errorf("atPriority off the journal: %q", got)
	}
}

// journalRun runs the otad binary with stderr on a pipe that JOURNAL_STREAM
// names, as systemd connects a service's stderr to the journal, and returns
// the lines it wrote until it printed stop (then it is killed) or exited.
func journalRun(t *testing.T, stop string, args ...string) []string {
	t.Helper()
	r, w, err := os.Pipe()
	devicetest.Must(t, err)
	defer r.Close()
	var st syscall.Stat_t
	devicetest.Must(t, syscall.Fstat(int(w.Fd()), &st))
	cmd := exec.Command(otadBin, args...)
	cmd.Stderr = w
	cmd.Env = append(os.Environ(), fmt.Sprintf("JOURNAL_STREAM=%d:%d", st.Dev, st.Ino))
	devicetest.Must(t, cmd.Start())
	w.Close()
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	timer := time.AfterFunc(20*time.Second, func() { cmd.Process.Kill() })
	defer timer.Stop()
	var lines []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if stop != "" && strings.Contains(sc.Text(), stop) {
			break
		}
	}
	return lines
}

// Under systemd every line otad writes says its priority, whichever part
// wrote it (the grubenv backend's warning too), so `journalctl -p warning`
// filters it; a refusal's message over several lines is several errors.
func TestJournalStreamLines(t *testing.T) {
	dir := t.TempDir()
	cfg := startupDevice{dir: dir, bootloader: "grub"}.write(t)
	devicetest.Must(t, os.Remove(filepath.Join(dir, "b"))) // a warning at start
	env, err := os.ReadFile(filepath.Join(dir, "grubenv"))
	devicetest.Must(t, err)
	// A torn tail, which GRUB and otad ignore: warned of.
	env[len(grub.Signature)+bytes.IndexByte(env[len(grub.Signature):], '#')] = 'x'
	devicetest.Must(t, os.WriteFile(filepath.Join(dir, "grubenv"), env, 0o600))
	lines := journalRun(t, "otad running", "run", "-v", "-c", cfg)
	prio := map[string]string{}
	for _, l := range lines {
		if len(l) < 3 || l[0] != '<' || l[2] != '>' {
			t.Errorf("line without a priority: %q", l)
			continue
		}
		if strings.Contains(l, "time=") {
			t.Errorf("line with a time (the journal stamps its own): %q", l)
		}
		for _, msg := range []string{"slot device not usable", "grubenv: malformed tail ignored", "otad running", "trusted keys loaded"} {
			if strings.Contains(l, "msg=\""+msg) || strings.Contains(l, "msg="+msg) {
				prio[msg] = l[:3]
			}
		}
	}
	for msg, want := range map[string]string{"slot device not usable": "<4>", "grubenv: malformed tail ignored": "<4>", "otad running": "<6>", "trusted keys loaded": "<6>"} {
		if prio[msg] != want {
			t.Errorf("%q logged at %q, want %s:\n%s", msg, prio[msg], want, strings.Join(lines, "\n"))
		}
	}

	// A refusal: the recovery commands under it are errors too.
	bad := filepath.Join(dir, "grubenv")
	devicetest.Must(t, os.WriteFile(bad, []byte("garbage"), 0o600))
	lines = journalRun(t, "", "run", "-c", cfg)
	if len(lines) < 3 {
		t.Fatalf("refusal: %q", lines)
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "<3>") {
			t.Errorf("refusal line not at error priority: %q", l)
		}
	}
}
