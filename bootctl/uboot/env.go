package uboot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/otad/otad/bootctl"
	"github.com/otad/otad/ota"
)

// DefaultLockFile is the lock fw_printenv/fw_setenv take; holding it too keeps a
// concurrent fw_setenv from interleaving with our read-modify-write.
const DefaultLockFile = "/var/lock/fw_printenv.lock"

// Env is a U-Boot environment described by a fw_env.config file.
type Env struct {
	config   string
	devs     []Copy
	attempts int
	lockFile string
	log      *slog.Logger

	mu   sync.Mutex
	disk bootctl.Disk // tests also skip thousands of fsyncs with it
}

// Snapshot is one read of the environment.
type Snapshot struct {
	Vars  map[string]string
	Copy  int  // the copy in use (0 or 1)
	Flags byte // its flags counter (redundant only)
	// Corrupt lists copies that failed their check and were passed over, so a
	// torn write or a worn sector is visible to callers (and logged).
	Corrupt []CopyError
}

// CopyError says why one copy was not used.
type CopyError struct {
	Copy int
	Path string
	Err  error
}

func (c CopyError) Error() string { return fmt.Sprintf("copy %d (%s): %v", c.Copy, c.Path, c.Err) }

// Open reads the config at configPath. attempts is what mark active / mark good
// set BOOT_x_LEFT to; it must match the boot script's default. log gets the
// warnings (a copy found corrupt); nil: none.
func Open(configPath string, attempts int, log *slog.Logger) (*Env, error) {
	if err := CheckAttempts(attempts); err != nil {
		return nil, fmt.Errorf("%s: %w", configPath, err)
	}
	devs, err := LoadConfig(configPath)
	if err != nil {
		return nil, err
	}
	return &Env{
		config:   configPath,
		devs:     devs,
		attempts: attempts,
		lockFile: DefaultLockFile,
		log:      orDiscard(log),
		disk:     bootctl.OSDisk(),
	}, nil
}

func orDiscard(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}

// WithDisk writes the env through d (OSDisk is otad's): the crash-state
// explorer records each write and sync through it.
func (e *Env) WithDisk(d bootctl.Disk) *Env {
	e.disk = d
	return e
}

// WithLockFile sets the flock file shared with fw_setenv; "" disables locking.
func (e *Env) WithLockFile(path string) *Env {
	e.lockFile = path
	return e
}

// Redundant reports whether the config names two copies.
func (e *Env) Redundant() bool { return len(e.devs) == 2 }

// lock takes the fw_printenv lock, polling so ctx can cancel the wait.
func (e *Env) lock(ctx context.Context) (func(), error) {
	if e.lockFile == "" {
		return func() {}, nil
	}
	f, err := os.OpenFile(e.lockFile, os.O_WRONLY|os.O_CREATE, 0o666)
	if errors.Is(err, os.ErrNotExist) {
		// No lock directory (a minimal initramfs): nobody else can hold the lock.
		return func() {}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("uboot env lock: %w", err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { _ = unix.Flock(int(f.Fd()), unix.LOCK_UN); f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			f.Close()
			return nil, fmt.Errorf("uboot env lock %s: %w", e.lockFile, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("uboot env lock %s: %w", e.lockFile, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// readCopy reads copy i's raw bytes.
func (e *Env) readCopy(i int) ([]byte, error) {
	d := e.devs[i]
	f, err := os.Open(d.Path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	off, err := resolveOffset(f, d.Offset)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, d.Size)
	if _, err := f.ReadAt(buf, off); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: short read of 0x%x bytes at offset 0x%x", bootctl.ErrBadEnv, d.Size, off)
		}
		return nil, err
	}
	return buf, nil
}

// resolveOffset turns a negative offset into one from the end of the device.
func resolveOffset(f *os.File, off int64) (int64, error) {
	if off >= 0 {
		return off, nil
	}
	end, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return 0, err
	}
	if end+off < 0 {
		return 0, fmt.Errorf("offset %d is before the start of a %d-byte device", off, end)
	}
	return end + off, nil
}

func (e *Env) load() (Snapshot, error) {
	red := e.Redundant()
	type copyRes struct {
		vars  map[string]string
		flags byte
		err   error
	}
	res := make([]copyRes, len(e.devs))
	for i := range e.devs {
		buf, err := e.readCopy(i)
		if err == nil {
			res[i].vars, res[i].flags, err = ParseEnv(buf, red)
		}
		res[i].err = err
	}
	var snap Snapshot
	var valid []int
	for i, r := range res {
		if r.err != nil {
			snap.Corrupt = append(snap.Corrupt, CopyError{Copy: i, Path: e.devs[i].Path, Err: r.err})
		} else {
			valid = append(valid, i)
		}
	}
	switch len(valid) {
	case 0:
		errs := make([]error, 0, len(snap.Corrupt))
		for _, c := range snap.Corrupt {
			errs = append(errs, c)
		}
		return Snapshot{}, fmt.Errorf("uboot env %s: %w: no valid copy: %w", e.config, bootctl.ErrBadEnv, errors.Join(errs...))
	case 1:
		snap.Copy = valid[0]
	default:
		snap.Copy = newerCopy(res[0].flags, res[1].flags)
	}
	snap.Vars, snap.Flags = res[snap.Copy].vars, res[snap.Copy].flags
	for _, c := range snap.Corrupt {
		e.log.Warn("uboot env: a copy is corrupt, using the other", "config", e.config, "copy", c.Copy, "path", c.Path, "err", c.Err)
	}
	return snap, nil
}

// Load reads the environment: the valid copy, the newer one when both are valid.
// A redundant env with one bad copy is used with a warning (see Snapshot.Corrupt);
// no valid copy at all is an ErrBadEnv error, never a silent default.
func (e *Env) Load(ctx context.Context) (Snapshot, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	unlock, err := e.lock(ctx)
	if err != nil {
		return Snapshot{}, err
	}
	defer unlock()
	return e.load()
}

// Update is one read-modify-write: fn edits the variables; when anything changed
// the new env is written to the copy not in use (redundant: flags+1, so a torn
// write leaves the current copy intact) and synced. Nothing is written when fn
// leaves the variables as they were.
func (e *Env) Update(ctx context.Context, fn func(vars map[string]string) error) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	unlock, err := e.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	snap, err := e.load()
	if err != nil {
		return err
	}
	vars := maps.Clone(snap.Vars)
	if err := fn(vars); err != nil {
		return err
	}
	if maps.Equal(vars, snap.Vars) && len(snap.Corrupt) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("uboot env %s: %w", e.config, err)
	}
	target, flags := 0, byte(0)
	if e.Redundant() {
		target, flags = 1-snap.Copy, snap.Flags+1
	}
	buf, err := EncodeEnv(vars, int(e.devs[target].Size), e.Redundant(), flags)
	if err != nil {
		return fmt.Errorf("uboot env %s: %w", e.devs[target].Path, err)
	}
	if err := e.writeCopy(target, buf); err != nil {
		return fmt.Errorf("uboot env %s: write copy %d: %w", e.devs[target].Path, target, err)
	}
	return nil
}

func (e *Env) writeCopy(i int, buf []byte) error {
	d := e.devs[i]
	f, err := os.OpenFile(d.Path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	off, err := resolveOffset(f, d.Offset)
	if err == nil {
		_, err = e.disk.WriteAt(f, buf, off)
	}
	if err == nil {
		err = e.disk.Sync(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// State reports the slots as the boot script will see them.
func (e *Env) State(ctx context.Context) (bootctl.State, error) {
	snap, err := e.Load(ctx)
	if err != nil {
		return bootctl.State{}, err
	}
	return StateOf(snap.Vars, e.attempts), nil
}

// MarkBad sets BOOT_x_LEFT=0.
func (e *Env) MarkBad(ctx context.Context, slot ota.Slot) error {
	if err := bootctl.CheckSlot(slot); err != nil {
		return fmt.Errorf("uboot mark bad: %w", err)
	}
	return e.Update(ctx, func(v map[string]string) error { return SetBad(v, slot) })
}

// MarkActive puts slot first in BOOT_ORDER with BOOT_x_LEFT=attempts.
func (e *Env) MarkActive(ctx context.Context, slot ota.Slot) error {
	if err := bootctl.CheckSlot(slot); err != nil {
		return fmt.Errorf("uboot mark active: %w", err)
	}
	return e.Update(ctx, func(v map[string]string) error { return SetActive(v, slot, e.attempts) })
}

// MarkGood sets BOOT_x_LEFT=attempts.
func (e *Env) MarkGood(ctx context.Context, slot ota.Slot) error {
	if err := bootctl.CheckSlot(slot); err != nil {
		return fmt.Errorf("uboot mark good: %w", err)
	}
	return e.Update(ctx, func(v map[string]string) error { return SetGood(v, slot, e.attempts) })
}

var _ bootctl.Bootloader = (*Env)(nil)
