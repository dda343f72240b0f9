package statelock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrBusy means another process holds the lock.
var ErrBusy = errors.New("busy: another otad process holds the state lock")

// ErrUnsafeDir means others could write the state directory: it is refused.
var ErrUnsafeDir = errors.New("not otad's alone")

// Lock is a held lock; Release lets it go (so does the process ending, even by SIGKILL).
type Lock struct{ f *os.File }

// Acquire takes <dir>/lock without waiting. It creates dir (0700) if needed.
// A state directory that others may write is refused (they could plant the
// journal or the lock), and the lock file is never a symlink.
func Acquire(dir string) (*Lock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir %s: %w", dir, err)
	}
	if err := Check(dir); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
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
	fmt.Fprintf(f, "%d\n", os.Getpid())
	return &Lock{f: f}, nil
}

// Check refuses a state directory owned by another user or writable by
// group or others (the error wraps ErrUnsafeDir), as Acquire does; a
// directory not there yet is fine: Acquire creates it.
func Check(dir string) error {
	fi, err := os.Stat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("state dir %s: %w", dir, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("state dir %s: no owner information", dir)
	}
	if int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("state dir %s: %w: owned by uid %d, not by otad's user (uid %d): chown it", dir, ErrUnsafeDir, st.Uid, os.Geteuid())
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("state dir %s: %w: mode %v is writable by others: chmod 0700 %s", dir, ErrUnsafeDir, fi.Mode().Perm(), dir)
	}
	return nil
}

// Release drops the lock.
func (l *Lock) Release() error { return l.f.Close() }
