package grub

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"sync"

	"github.com/otad/otad/bootctl"
	"github.com/otad/otad/ota"
)

// Env is a grubenv file. It is edited in place: GRUB's save_env writes the file
// through its disk blocks, so the file is never truncated, replaced or renamed.
type Env struct {
	path string
	log  *slog.Logger

	mu   sync.Mutex
	disk bootctl.Disk
}

// Snapshot is one read of the block.
type Snapshot struct {
	Vars map[string]string
	// Broken is the offset of a malformed tail (a torn append), which GRUB ignores
	// like this reader does; -1 when the block is clean. The next write drops it.
	Broken int
}

// Open checks that envFile is a 1024-byte grubenv. attempts is accepted for
// symmetry with the other backends; GRUB's scheme has one try per slot. log
// gets the warnings (a torn tail ignored); nil: none.
func Open(envFile string, attempts int, log *slog.Logger) (*Env, error) {
	_ = attempts
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e := &Env{path: envFile, log: log, disk: bootctl.OSDisk()}
	if _, err := e.read(); err != nil {
		return nil, err
	}
	return e, nil
}

// WithDisk writes the block through d (OSDisk is otad's): the crash-state
// explorer records each write and sync through it.
func (e *Env) WithDisk(d bootctl.Disk) *Env {
	e.disk = d
	return e
}

// Path is the grubenv file.
func (e *Env) Path() string { return e.path }

func (e *Env) read() ([]byte, error) {
	f, err := os.Open(e.path)
	if err != nil {
		return nil, fmt.Errorf("grubenv: %w", err)
	}
	defer f.Close()
	return readBlock(f, e.path)
}

func readBlock(f *os.File, path string) ([]byte, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("grubenv: %w", err)
	}
	if !fi.Mode().IsRegular() || fi.Size() != BlockSize {
		return nil, fmt.Errorf("grubenv %s: %w: want a regular file of exactly %d bytes, have %d bytes (%v)", path, bootctl.ErrBadEnv, BlockSize, fi.Size(), fi.Mode().Type())
	}
	buf := make([]byte, BlockSize)
	if _, err := f.ReadAt(buf, 0); err != nil {
		return nil, fmt.Errorf("grubenv %s: %w", path, err)
	}
	return buf, nil
}

func (e *Env) snapshot(buf []byte) (Snapshot, error) {
	entries, broken, err := iterate(buf)
	if err != nil {
		return Snapshot{}, fmt.Errorf("grubenv %s: %w", e.path, err)
	}
	if broken >= 0 {
		e.log.Warn("grubenv: malformed tail ignored, as GRUB does (a torn write?)", "file", e.path, "offset", broken)
	}
	return Snapshot{Vars: toMap(entries), Broken: broken}, nil
}

// Load reads the variables as GRUB's load_env sees them.
func (e *Env) Load(ctx context.Context) (Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return Snapshot{}, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	buf, err := e.read()
	if err != nil {
		return Snapshot{}, err
	}
	return e.snapshot(buf)
}

// Update sets variables in one in-place write of the block (pwrite at 0, fsync),
// leaving every other line as it is. Nothing is written when nothing changes.
func (e *Env) Update(ctx context.Context, set map[string]string) error {
	return e.update(ctx, func(map[string]string) map[string]string { return set })
}

// update is one read-modify-write under the lock; fn returns the variables to set.
func (e *Env) update(ctx context.Context, fn func(cur map[string]string) map[string]string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	f, err := os.OpenFile(e.path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("grubenv: %w", err)
	}
	defer f.Close()
	old, err := readBlock(f, e.path)
	if err != nil {
		return err
	}
	snap, err := e.snapshot(old)
	if err != nil {
		return err
	}
	set := fn(snap.Vars)
	cur := maps.Clone(snap.Vars)
	maps.Copy(cur, set)
	if maps.Equal(cur, snap.Vars) && snap.Broken < 0 {
		return nil
	}
	buf, err := updateBlock(old, set)
	if err != nil {
		return fmt.Errorf("grubenv %s: %w", e.path, err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("grubenv %s: %w", e.path, err)
	}
	if _, err := e.disk.WriteAt(f, buf, 0); err != nil {
		return fmt.Errorf("grubenv %s: write: %w", e.path, err)
	}
	if err := e.disk.Sync(f); err != nil {
		return fmt.Errorf("grubenv %s: fsync: %w", e.path, err)
	}
	return nil
}

// State reports the slots as grub.cfg will see them (AttemptsLeft is -1).
func (e *Env) State(ctx context.Context) (bootctl.State, error) {
	snap, err := e.Load(ctx)
	if err != nil {
		return bootctl.State{}, err
	}
	return grubState(snap.Vars), nil
}

func (e *Env) mark(ctx context.Context, mark string, slot ota.Slot) error {
	if err := bootctl.CheckSlot(slot); err != nil {
		return fmt.Errorf("grub mark %s: %w", mark, err)
	}
	return e.update(ctx, func(cur map[string]string) map[string]string { return applyMark(cur, mark, slot) })
}

// MarkBad sets x_OK=0, x_TRY=0.
func (e *Env) MarkBad(ctx context.Context, slot ota.Slot) error { return e.mark(ctx, markBad, slot) }

// MarkActive puts slot first in ORDER with x_OK=1, x_TRY=0.
func (e *Env) MarkActive(ctx context.Context, slot ota.Slot) error {
	return e.mark(ctx, markActive, slot)
}

// MarkGood sets x_OK=1, x_TRY=0.
func (e *Env) MarkGood(ctx context.Context, slot ota.Slot) error { return e.mark(ctx, markGood, slot) }

var _ bootctl.Bootloader = (*Env)(nil)
