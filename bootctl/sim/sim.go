package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/otad/otad/bootctl"
	"github.com/otad/otad/bootctl/uboot"
	"github.com/otad/otad/ota"
)

// state is the file's content.
type state struct {
	Vars      map[string]string `json:"vars"`
	Booted    ota.Slot          `json:"booted"`
	BootCount uint64            `json:"boot_count"`
}

// Sim is a simulated device's bootloader.
type Sim struct {
	path     string
	attempts int

	mu sync.Mutex
	// mem holds the state instead of the file (NewMemory): a simulated
	// fleet of thousands keeps no file per device.
	mem *state
	// commit renames the written temp file into place; tests replace it to cut the
	// power before the rename.
	commit func(tmp, path string) error
}

// Open opens the state file at path, creating it on first use: booted A,
// BOOT_ORDER="A B", both counters at attempts, boot count 0.
func Open(path string, attempts int) (*Sim, error) {
	if err := uboot.CheckAttempts(attempts); err != nil {
		return nil, fmt.Errorf("sim %s: %w", path, err)
	}
	s := &Sim{path: path, attempts: attempts, commit: os.Rename}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		if err := s.save(factory(attempts)); err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	if _, err := s.load(); err != nil {
		return nil, err
	}
	return s, nil
}

// NewMemory is a simulated bootloader whose state lives in memory, as new
// from the factory (as Open creates it); it outlives the agents run on it,
// as the file does.
func NewMemory(attempts int) (*Sim, error) {
	if err := uboot.CheckAttempts(attempts); err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	st := factory(attempts)
	return &Sim{path: "in memory", attempts: attempts, mem: &st}, nil
}

// factory is the state of a new device: booted A, BOOT_ORDER="A B", both
// counters at attempts, boot count 0.
func factory(attempts int) state {
	return state{
		Vars: map[string]string{
			uboot.OrderVar:           bootctl.DefaultOrder,
			uboot.LeftVar(ota.SlotA): uboot.Counter(attempts),
			uboot.LeftVar(ota.SlotB): uboot.Counter(attempts),
		},
		Booted: ota.SlotA,
	}
}

// Path is the state file.
func (s *Sim) Path() string { return s.path }

func (s *Sim) load() (state, error) {
	if s.mem != nil {
		st := *s.mem
		st.Vars = maps.Clone(st.Vars)
		return st, nil
	}
	b, err := os.ReadFile(s.path)
	if err != nil {
		return state{}, fmt.Errorf("sim: %w", err)
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return state{}, fmt.Errorf("sim %s: %w: %w", s.path, bootctl.ErrBadEnv, err)
	}
	if st.Vars == nil {
		return state{}, fmt.Errorf("sim %s: %w: no \"vars\"", s.path, bootctl.ErrBadEnv)
	}
	if err := bootctl.CheckSlot(st.Booted); err != nil {
		return state{}, fmt.Errorf("sim %s: field \"booted\": %w", s.path, err)
	}
	return st, nil
}

// save replaces the file atomically: temp file, fsync, rename, fsync the directory.
func (s *Sim) save(st state) error {
	if s.mem != nil {
		st.Vars = maps.Clone(st.Vars)
		*s.mem = st
		return nil
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("sim %s: %w", s.path, err)
	}
	dir := filepath.Dir(s.path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(s.path)+".tmp*")
	if err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after a successful rename
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = s.commit(tmp, s.path)
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		return fmt.Errorf("sim %s: save: %w", s.path, err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// update is one read-modify-write of the file; unchanged state is not written.
func (s *Sim) update(ctx context.Context, fn func(st *state) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st, err := s.load()
	if err != nil {
		return err
	}
	old := st
	old.Vars = maps.Clone(st.Vars)
	if err := fn(&st); err != nil {
		return fmt.Errorf("sim %s: %w", s.path, err)
	}
	if maps.Equal(old.Vars, st.Vars) && old.Booted == st.Booted && old.BootCount == st.BootCount {
		return nil
	}
	return s.save(st)
}

// Vars returns a copy of the simulated environment.
func (s *Sim) Vars() (map[string]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, err := s.load()
	if err != nil {
		return nil, err
	}
	return st.Vars, nil
}

// State reports the slots as the boot script will see them.
func (s *Sim) State(ctx context.Context) (bootctl.State, error) {
	if err := ctx.Err(); err != nil {
		return bootctl.State{}, err
	}
	v, err := s.Vars()
	if err != nil {
		return bootctl.State{}, err
	}
	return uboot.StateOf(v, s.attempts), nil
}

// MarkBad sets BOOT_x_LEFT=0.
func (s *Sim) MarkBad(ctx context.Context, slot ota.Slot) error {
	return s.update(ctx, func(st *state) error { return uboot.SetBad(st.Vars, slot) })
}

// MarkActive puts slot first in BOOT_ORDER with BOOT_x_LEFT=attempts.
func (s *Sim) MarkActive(ctx context.Context, slot ota.Slot) error {
	return s.update(ctx, func(st *state) error { return uboot.SetActive(st.Vars, slot, s.attempts) })
}

// MarkGood sets BOOT_x_LEFT=attempts.
func (s *Sim) MarkGood(ctx context.Context, slot ota.Slot) error {
	return s.update(ctx, func(st *state) error { return uboot.SetGood(st.Vars, slot, s.attempts) })
}

// Booted is the slot the simulated device booted last.
func (s *Sim) Booted() (ota.Slot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, err := s.load()
	if err != nil {
		return "", err
	}
	return st.Booted, nil
}

// BootID identifies the current boot; it changes on every Boot.
func (s *Sim) BootID() (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, err := s.load()
	if err != nil {
		return "", err
	}
	return bootID(st.BootCount), nil
}

func bootID(n uint64) string { return "sim-boot-" + strconv.FormatUint(n, 10) }

// Boot powers the simulated device on: the boot script's rules pick the slot and
// count its attempt down (uboot.Pick), and the slot and a new boot ID are
// recorded. It returns the booted slot.
func (s *Sim) Boot() (ota.Slot, error) {
	var slot ota.Slot
	err := s.update(context.Background(), func(st *state) error {
		picked, nv := uboot.Pick(st.Vars, s.attempts)
		if picked == "" {
			return fmt.Errorf("%w: BOOT_ORDER %q names no slot; U-Boot would reset forever", bootctl.ErrBadEnv, st.Vars[uboot.OrderVar])
		}
		st.Vars, st.Booted, slot = nv, picked, picked
		st.BootCount++
		return nil
	})
	if err != nil {
		return "", err
	}
	return slot, nil
}

var _ bootctl.Bootloader = (*Sim)(nil)
