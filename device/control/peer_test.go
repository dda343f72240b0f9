package control

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/otad/otad/ota"
)

// countingHandler records which operations reached the daemon.
type countingHandler struct{ calls atomic.Int32 }

func (h *countingHandler) InstallFrom(context.Context, string, []byte) (ota.Outcome, error) {
	h.calls.Add(1)
	return ota.Outcome{}, nil
}
func (h *countingHandler) Status() ota.Status                 { h.calls.Add(1); return ota.Status{} }
func (h *countingHandler) MarkGood(ctx context.Context) error { h.calls.Add(1); return nil }
func (h *countingHandler) MarkBad(ctx context.Context) error  { h.calls.Add(1); return nil }
func (h *countingHandler) Cancel(ctx context.Context) error   { h.calls.Add(1); return nil }
func (h *countingHandler) MarkActive(ctx context.Context, other bool) error {
	h.calls.Add(1)
	return nil
}

// dialAs connects to path with the calling thread's effective uid set to uid
// (credentials are per thread on Linux; SO_PEERCRED records the euid at
// connect), then restores it.
func dialAs(t *testing.T, path string, uid int) net.Conn {
	t.Helper()
	runtime.LockOSThread()
	if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESUID, ^uintptr(0), uintptr(uid), ^uintptr(0)); e != 0 {
		runtime.UnlockOSThread()
		t.Fatalf("seteuid %d: %v", uid, e)
	}
	c, err := net.Dial("unix", path)
	if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESUID, ^uintptr(0), 0, ^uintptr(0)); e != 0 {
		// Leave the thread locked: it dies with the goroutine instead of running others as uid.
		t.Fatalf("restore euid: %v", e)
	}
	runtime.UnlockOSThread()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Issue 9: even with the socket's mode loosened, a peer that is neither root
// nor the daemon's user is refused before its request is read.
func TestPeerCheck(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to connect as another user")
	}
	dir, err := os.MkdirTemp("", "otad-control")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	path := filepath.Join(dir, "otad.sock")
	h := &countingHandler{}
	srv, err := Listen(path, h, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	go srv.Serve(t.Context())
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v, want 0600", fi.Mode().Perm())
	}
	os.Chmod(path, 0o666) // someone loosened it

	for _, c := range []struct {
		name  string
		uid   int
		allow bool
	}{{"root", 0, true}, {"nobody", 65534, false}} {
		t.Run(c.name, func(t *testing.T) {
			before := h.calls.Load()
			conn := dialAs(t, path, c.uid)
			defer conn.Close()
			json.NewEncoder(conn).Encode(request{Op: "mark-good"})
			var resp response
			if err := json.NewDecoder(conn).Decode(&resp); err != nil {
				t.Fatal(err)
			}
			called := h.calls.Load() != before
			if c.allow && (resp.Error != "" || !called) {
				t.Fatalf("root refused: %q", resp.Error)
			}
			if !c.allow && (called || !strings.Contains(resp.Error, "may not control otad")) {
				t.Fatalf("uid %d: handler called %v, response %q", c.uid, called, resp.Error)
			}
		})
	}
}
