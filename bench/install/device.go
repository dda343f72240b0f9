package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/otad/otad/device/config"
	"github.com/otad/otad/internal/testkit/signer"
	"github.com/otad/otad/sim/device"
)

// testDevice is a file-backed device for otad (sim/device): a sim
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
	sum      string // the image's sha256
	rel      *signer.Signer
}

const compatible = "otad,installbench"

// newTestDevice lays the device out under dir, trusting rel (and the update
// server's CA ca, with -https), and signs an
// offer for the image at url (with sum; none without). Readback on is left
// to the default, so the bench measures what a device gets without saying
// anything. The reboot policy is manual:
// `otad install` returns once the image is staged and the boot slot
// flipped, without a (simulated) reboot in the timing.
func newTestDevice(dir, url string, size int64, sum string, rel *signer.Signer, ca string) (*testDevice, error) {
	spec := device.Spec{
		ID: "bench-0001", Dir: dir, Compatible: compatible, SlotSize: size, TrustedKey: rel.PublicKeyPEM, RebootPolicy: "manual",
		Download: config.Download{Retries: 1, Backoff: config.Duration{Duration: 100 * time.Millisecond}, MaxBackoff: config.Duration{Duration: time.Second},
			CAFile: ca},
	}
	if ca != "" {
		spec.Download.Schemes = []string{"https"}
	}
	p, _, err := device.Layout(spec)
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
		sum:      sum,
		rel:      rel,
	}
	if err := os.WriteFile(d.cfg[false], noReadback, 0o600); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if sum == "" {
		return d, nil
	}
	d.envelope, err = d.sign(signer.Offer{ID: "installbench", Version: "bench-1", SecurityVersion: 1, Compatible: compatible,
		URL: url, Size: size, SHA256: sum}, "")
	return d, err
}

// sign writes the envelope of o beside the device's config and returns its
// path: offer.json, or offer-NAME.json.
func (d *testDevice) sign(o signer.Offer, name string) (string, error) {
	env, err := d.rel.Sign(o)
	if err != nil {
		return "", err
	}
	path := filepath.Join(filepath.Dir(d.cfg[true]), "offer.json")
	if name != "" {
		path = filepath.Join(filepath.Dir(d.cfg[true]), "offer-"+name+".json")
	}
	if err := os.WriteFile(path, env, 0o600); err != nil {
		return "", fmt.Errorf("envelope: %w", err)
	}
	return path, nil
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
