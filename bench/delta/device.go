package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/otad/otad/bootctl/sim"
	"github.com/otad/otad/device/config"
	"github.com/otad/otad/internal/testkit/otadrun"
	simdevice "github.com/otad/otad/sim/device"
)

const compatible = "otad,deltabench"

// device is a file-backed device (sim/device) that otad installs on: sim
// bootloader, two slot files, state and trust directories. Every measured
// install starts from the same saved state.
type device struct {
	otad     string
	cpus     string // taskset -c: the cores installs run on ("" all)
	p        simdevice.Paths
	slotSize int64
	target   string // the slot the measured installs write: the one not booted
	saved    string // a copy of the state directory and the boot env, taken by save
}

// newDevice lays a device out under dir; both slots are blank and it
// boots slot A. The reboot policy is manual: `otad install` returns once the
// image is staged and the boot slot flipped, no (simulated) reboot timed.
func newDevice(otad, cpus, dir string, slotSize int64, trusted []byte, readback bool) (*device, error) {
	spec := simdevice.Spec{
		ID: "bench-delta", Dir: dir, Compatible: compatible, SlotSize: slotSize, TrustedKey: trusted,
		RebootPolicy: "manual", Readback: &readback,
		Download: config.Download{Retries: 1, Backoff: config.Duration{Duration: 100 * time.Millisecond}, MaxBackoff: config.Duration{Duration: time.Second}},
	}
	p, _, err := simdevice.Layout(spec)
	if err != nil {
		return nil, err
	}
	d := &device{otad: otad, cpus: cpus, p: p, slotSize: slotSize, target: p.SlotB, saved: filepath.Join(dir, "saved")}
	return d, d.save()
}

// boot installs env (the old image) as an update would have, boots it and
// commits it: the device then runs the old image from slot B and keeps
// what otad knows of it (its index). That is the state measured installs
// start from.
func (d *device) boot(ctx context.Context, env string) error {
	if _, err := otadrun.Install(ctx, d.otad, d.p.Config, env, nil); err != nil {
		return err
	}
	s, err := sim.Open(d.p.EnvFile, simdevice.Attempts)
	if err != nil {
		return err
	}
	if slot, err := s.Boot(); err != nil || slot != "B" {
		return fmt.Errorf("the device booted %q after installing the old image (%v)", slot, err)
	}
	if err := otadrun.MarkGood(ctx, d.otad, d.p.Config); err != nil {
		return err
	}
	d.target = d.p.SlotA
	return d.save()
}

// save copies the state directory and the boot env aside.
func (d *device) save() error {
	if err := os.RemoveAll(d.saved); err != nil {
		return err
	}
	return copyTree(d.p.Dir, d.saved, []string{filepath.Base(d.p.StateDir), filepath.Base(d.p.EnvFile)})
}

// restore puts the state and the boot env back as save left them.
func (d *device) restore() error {
	for _, p := range []string{d.p.StateDir, d.p.EnvFile} {
		if err := os.RemoveAll(p); err != nil {
			return err
		}
	}
	return copyTree(d.saved, d.p.Dir, []string{filepath.Base(d.p.StateDir), filepath.Base(d.p.EnvFile)})
}

// install runs a measured `otad install` of env from the saved state into a
// freshly allocated target slot, checks the slot holds the image (want,
// size bytes) and reads what otad says it transferred.
func (d *device) install(ctx context.Context, env, want string, size int64) (otadrun.Sample, transfer, error) {
	if err := d.restore(); err != nil {
		return otadrun.Sample{}, transfer{}, fmt.Errorf("restore the device: %w", err)
	}
	if err := allocate(d.target, d.slotSize); err != nil {
		return otadrun.Sample{}, transfer{}, err
	}
	unix.Sync() // nobody else's writeback lands in the timing
	s, err := otadrun.InstallPinned(ctx, d.cpus, d.otad, d.p.Config, env, nil)
	if err != nil {
		// What the failed install had moved, when otad can say.
		var st statusDoc
		if otadrun.Status(ctx, d.otad, d.p.Config, &st) == nil {
			t, _ := st.transfer()
			return s, t, err
		}
		return s, transfer{}, err
	}
	// What otad says it moved, also for an image that came out wrong.
	var st statusDoc
	if err := otadrun.Status(ctx, d.otad, d.p.Config, &st); err != nil {
		return s, transfer{}, err
	}
	t, terr := st.transfer()
	got, err := prefixSHA256(d.target, size)
	if err != nil {
		return s, t, err
	}
	if got != want {
		return s, t, fmt.Errorf("slot %s does not hold the new image after the install: sha256 %s, want %s", d.target, got, want)
	}
	return s, t, terr
}

// transfer is where an install's bytes came from, as otad reports it
// (docs/contract/formats.md): path and bytes_delta are the delta feature's.
type transfer struct {
	Path    string `json:"path"`
	Fetched int64  `json:"bytes_fetched"`
	Reused  int64  `json:"bytes_reused"`
	Delta   int64  `json:"bytes_delta"`
}

// statusDoc is the part of `otad status --json` the bench reads.
type statusDoc struct {
	State      string `json:"state"`
	LastResult *struct {
		ID     string `json:"id"`
		Result string `json:"result"`
		transfer
	} `json:"last_result"`
	Target *struct {
		ID string `json:"id"`
		transfer
	} `json:"target"`
}

// transfer is the install's figures: from last_result once it has one,
// else from the staged target.
func (s statusDoc) transfer() (transfer, error) {
	switch {
	case s.LastResult != nil && s.LastResult.Result != "" && s.LastResult.Result != "success":
		return s.LastResult.transfer, fmt.Errorf("the install ended %s (state %s)", s.LastResult.Result, s.State)
	case s.Target != nil && (s.Target.Fetched > 0 || s.Target.Reused > 0):
		return s.Target.transfer, nil
	case s.LastResult != nil:
		return s.LastResult.transfer, nil
	}
	return transfer{}, fmt.Errorf("otad status names no install (state %s)", s.State)
}

// allocate replaces path with size bytes of allocated, unwritten blocks:
// every install writes fresh blocks, never a sparse file that grows.
func allocate(path string, size int64) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
		if err := f.Truncate(size); err != nil {
			return fmt.Errorf("slot %s: %w", path, err)
		}
	}
	return f.Close()
}

// prefixSHA256 hashes path's first n bytes, then drops them from the page
// cache: checking a slot does not warm it for the next install.
func prefixSHA256(path string, n int64) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.CopyBuffer(h, io.LimitReader(f, n), make([]byte, 4<<20)); err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// copyTree copies the named entries of src (files or directories) into dst.
func copyTree(src, dst string, names []string) error {
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return err
	}
	for _, name := range names {
		root := filepath.Join(src, name)
		err := filepath.Walk(root, func(path string, info os.FileInfo, err error) error {
			if err != nil {
				if errors.Is(err, os.ErrNotExist) && path == root {
					return nil // a device that has not written it yet
				}
				return err
			}
			rel, _ := filepath.Rel(src, path)
			to := filepath.Join(dst, rel)
			if info.IsDir() {
				return os.MkdirAll(to, info.Mode().Perm())
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			return os.WriteFile(to, b, info.Mode().Perm())
		})
		if err != nil {
			return fmt.Errorf("copy %s: %w", root, err)
		}
	}
	return nil
}
