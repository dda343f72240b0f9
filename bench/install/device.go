package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/otad/otad/verify"
)

// testDevice is a file-backed device for otad: a sim bootloader, two slot
// files, a trust directory with a fresh key, and a signed offer of the image.
type testDevice struct {
	dir      string
	slotA    string
	slotB    string // the inactive slot: every install writes here
	stateDir string
	envFile  string
	// cfg maps readback on/off to a config file for it.
	cfg      map[bool]string
	envelope string
}

const (
	compatible = "otad,installbench"
	// slotASize: slot A is booted and never written; its size is irrelevant.
	slotASize = 1 << 20
)

// newTestDevice lays the device out under dir and signs an offer for the
// image at url.
func newTestDevice(dir, url string, size int64, sum string) (*testDevice, error) {
	d := &testDevice{
		dir:      dir,
		slotA:    filepath.Join(dir, "slotA"),
		slotB:    filepath.Join(dir, "slotB"),
		stateDir: filepath.Join(dir, "state"),
		envFile:  filepath.Join(dir, "bootenv.json"),
		cfg:      map[bool]string{},
		envelope: filepath.Join(dir, "offer.json"),
	}
	keysDir := filepath.Join(dir, "keys")
	if err := os.MkdirAll(keysDir, 0o700); err != nil {
		return nil, fmt.Errorf("trust dir: %w", err)
	}
	if err := os.WriteFile(d.slotA, make([]byte, slotASize), 0o600); err != nil {
		return nil, fmt.Errorf("slot A: %w", err)
	}
	key, err := verify.GenerateKey(verify.KeyECDSAP256)
	if err != nil {
		return nil, err
	}
	pub, err := verify.MarshalPublicKeyPEM(key.Public())
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(keysDir, "bench.pub"), pub, 0o644); err != nil {
		return nil, fmt.Errorf("trust dir: %w", err)
	}
	for _, readback := range []bool{false, true} {
		path := filepath.Join(dir, fmt.Sprintf("otad-readback-%v.toml", readback))
		if err := os.WriteFile(path, []byte(d.config(keysDir, readback)), 0o600); err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		d.cfg[readback] = path
	}
	issued := time.Now().UTC().Add(-time.Minute).Truncate(time.Second)
	m := verify.Manifest{
		Schema: 1, ID: "installbench", Version: "bench-1", SecurityVersion: 1, Compatible: []string{compatible},
		IssuedAt: issued, ExpiresAt: issued.Add(24 * time.Hour),
		Payload: verify.Payload{URL: url, Compression: verify.CompressionNone, Size: size, SHA256: sum},
	}
	env, err := verify.SignOffer(&m, key)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(d.envelope, env, 0o600); err != nil {
		return nil, fmt.Errorf("envelope: %w", err)
	}
	return d, nil
}

// config is otad.toml for the device. Readback on is left to the default,
// so the bench measures what a device gets without saying anything. The
// reboot policy is manual: `otad install` returns once the image is staged
// and the boot slot flipped, without a (simulated) reboot in the timing.
func (d *testDevice) config(keysDir string, readback bool) string {
	rb := ""
	if !readback {
		rb = "readback = false\n"
	}
	return fmt.Sprintf(`device_id = "bench-0001"
compatible = %q
state_dir = %q
control_socket = %q
[trust]
keys_dir = %q
[slots]
A = %q
B = %q
%s[bootloader]
type = "sim"
env_file = %q
[download]
schemes = ["http"]
retries = 1
backoff = "100ms"
max_backoff = "1s"
[reboot]
policy = "manual"
`, compatible, d.stateDir, filepath.Join(d.dir, "otad.sock"), keysDir, d.slotA, d.slotB, rb, d.envFile)
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
