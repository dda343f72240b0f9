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

// ErrNoDir means the state directory is not one and cannot be made one:
// a regular file, or a path (under /proc) where mkdir fails.
var ErrNoDir = errors.New("cannot be otad's state directory")

// Lock is a held lock; Release lets it go (so does the process ending, even by SIGKILL).
type Lock struct{ f *os.File }

// Acquire takes <dir>/lock without waiting. It creates dir (0700) if needed.
// A state directory that others may write is refused (they could plant the
// journal or the lock), and the lock file is never a symlink.
func Acquire(dir string) (*Lock, error) {
	// Checked first too, so that run's refusal reads as config check's.
	if err := Check(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir %s: %w: %w", dir, ErrNoDir, err)
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
// directory not there yet is fine when Acquire can create it (else the
// error wraps ErrNoDir).
func Check(dir string) error {
	fi, err := os.Stat(dir)
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return creatable(dir)
	}
	if err != nil {
		return fmt.Errorf("state dir %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("state dir %s: %w: not a directory", dir, ErrNoDir)
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

// creatable reports whether MkdirAll(dir) would succeed, leaving nothing
// behind: the nearest existing ancestor must be a directory where a
// directory can be made. access(2) grants root everything (/proc included),
// so a probe directory is made there and removed at once.
func creatable(dir string) error {
	anc := filepath.Clean(dir)
	for {
		fi, err := os.Stat(anc)
		if err == nil && !fi.IsDir() {
			return fmt.Errorf("state dir %s: %w: %s is not a directory", dir, ErrNoDir, anc)
		}
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrNotExist) || filepath.Dir(anc) == anc {
			return fmt.Errorf("state dir %s: %w: %w", dir, ErrNoDir, err)
		}
		anc = filepath.Dir(anc)
	}
	probe, err := os.MkdirTemp(anc, ".otad-check-")
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err // not the probe's name
		}
		return fmt.Errorf("state dir %s: %w: cannot create a directory in %s: %w", dir, ErrNoDir, anc, err)
	}
	return os.Remove(probe)
}

// Release drops the lock.
func (l *Lock) Release() error { return l.f.Close() }
