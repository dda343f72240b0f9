package demo

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/otad/otad/bootctl/sim"
)

// ErrUnhealthy is a failed demo health check: the booted slot holds a broken
// image, or something the demo did not put there.
var ErrUnhealthy = errors.New("unhealthy")

// HealthArgs say where a simulated device keeps its boot state and slots.
type HealthArgs struct {
	EnvFile  string // the sim bootloader's state file (records the booted slot)
	Attempts int    // bootloader.attempts, as configured
	Slots    map[string]string
}

// CheckHealth is the demo devices' health check: it reads the first bytes of
// the slot the sim bootloader booted and passes only for a good demo image.
// A real device would check its services; this one checks what it runs.
func CheckHealth(a HealthArgs) (string, error) {
	// sim.Open would create a missing file: a check must not invent a boot state.
	if _, err := os.Stat(a.EnvFile); err != nil {
		return "", fmt.Errorf("health: bootloader.env_file: %w", err)
	}
	s, err := sim.Open(a.EnvFile, a.Attempts)
	if err != nil {
		return "", fmt.Errorf("health: %w", err)
	}
	slot, err := s.Booted()
	if err != nil {
		return "", fmt.Errorf("health: %w", err)
	}
	booted := string(slot)
	path, ok := a.Slots[booted]
	if !ok {
		return "", fmt.Errorf("health: booted slot %s has no path", booted)
	}
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("health: slot %s: %w", booted, err)
	}
	defer f.Close()
	head := make([]byte, 64)
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("health: slot %s (%s): %w", booted, path, err)
	}
	head, _, _ = bytes.Cut(head[:n], []byte("\n"))
	switch {
	case bytes.HasPrefix(head, []byte(BrokenMarker)):
		return booted, fmt.Errorf("%w: slot %s (%s) runs a broken image: %q", ErrUnhealthy, booted, path, head)
	case bytes.HasPrefix(head, []byte(GoodMarker)):
		return booted, nil
	}
	return booted, fmt.Errorf("%w: slot %s (%s) holds no demo image: %q", ErrUnhealthy, booted, path, head)
}
