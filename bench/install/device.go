package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/otad/otad/internal/config"
	"github.com/otad/otad/internal/simdevice"
	"github.com/otad/otad/internal/testkit/signer"
)

// testDevice is a file-backed device for otad (internal/simdevice): a sim
// bootloader, two slot files, a trust directory with a fresh key, and a
// signed offer of the image.
type testDevice struct {
	slotA    string
	slotB    string // the inactive slot: every install writes here
	stateDir string
	envFile  string
	// cfg maps readback on/off to a config file for it.
	cfg      map[bool]string
	envelope string
}

const compatible = "otad,installbench"

// newTestDevice lays the device out under dir and signs an offer for the
// image at url. Readback on is left to the default, so the bench measures
// what a device gets without saying anything. The reboot policy is manual:
// `otad install` returns once the image is staged and the boot slot
// flipped, without a (simulated) reboot in the timing.
func newTestDevice(dir, url string, size int64, sum string) (*testDevice, error) {
	rel, err := signer.New()
	if err != nil {
		return nil, err
	}
	spec := simdevice.Spec{
		ID: "bench-0001", Dir: dir, Compatible: compatible, SlotSize: size, TrustedKey: rel.PublicKeyPEM, RebootPolicy: "manual",
		Download: config.Download{Retries: 1, Backoff: config.Duration{Duration: 100 * time.Millisecond}, MaxBackoff: config.Duration{Duration: time.Second}},
	}
	p, _, err := simdevice.Layout(spec)
	if err != nil {
		return nil, err
	}
	off := false
	spec.Readback = &off
	noReadback, err := spec.Config()
	if err != nil {
		return nil, err
	}
	d := &testDevice{
		slotA: p.SlotA, slotB: p.SlotB, stateDir: p.StateDir, envFile: p.EnvFile,
		cfg:      map[bool]string{true: p.Config, false: filepath.Join(dir, "otad-readback-off.toml")},
		envelope: filepath.Join(dir, "offer.json"),
	}
	if err := os.WriteFile(d.cfg[false], noReadback, 0o600); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	env, err := rel.Sign(signer.Offer{ID: "installbench", Version: "bench-1", SecurityVersion: 1, Compatible: compatible,
		URL: url, Size: size, SHA256: sum})
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(d.envelope, env, 0o600); err != nil {
		return nil, fmt.Errorf("envelope: %w", err)
	}
	return d, nil
}

// reset forgets the previous install: an empty state directory and a sim
// bootloader that boots A again, so the next install is a fresh one to B.
func (d *testDevice) reset() error {
	if err := os.RemoveAll(d.stateDir); err != nil {
		return fmt.Errorf("reset state dir: %w", err)
	}
	if err := os.Remove(d.envFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("reset sim bootloader: %w", err)
	}
	return nil
}
