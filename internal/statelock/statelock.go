// Package statelock holds the exclusive lock on otad's state directory: the
// one thing that keeps two processes from writing a slot or the boot env at
// once (SPEC §6).
package statelock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrBusy means another process holds the lock.
var ErrBusy = errors.New("busy: another otad process holds the state lock")

// Lock is a held lock; Release lets it go (so does the process ending, even by SIGKILL).
type Lock struct{ f *os.File }

// Acquire takes <dir>/lock without waiting. It creates dir (0700) if needed.
func Acquire(dir string) (*Lock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir %s: %w", dir, err)
	}
	path := filepath.Join(dir, "lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			if pid := strings.TrimSpace(string(holder)); pid != "" {
				return nil, fmt.Errorf("%w (pid %s, %s)", ErrBusy, pid, path)
			}
			return nil, fmt.Errorf("%w (%s)", ErrBusy, path)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	// The pid is only for the busy message; the flock is what counts.
	f.Truncate(0)
	f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return &Lock{f: f}, nil
}

// Release drops the lock.
func (l *Lock) Release() error { return l.f.Close() }
