package demo

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// The demo fleet's fixed parts.
const (
	group      = "demo"
	compatible = "otad,demo-sim"
	// SlotSize is each simulated slot's size; images must fit.
	SlotSize = 8 << 20
	// A short commit window: the broken image's health check fails twice
	// (the agent retries every 5 s) and the device rolls back within seconds.
	commitWindow = 6 * time.Second
	refresh      = 300 * time.Millisecond
	chunkSize    = 64 << 10 // otactl sign --chunked's default
)

// Options shape one run of the demo.
type Options struct {
	Dir       string // work directory: empty or absent, kept afterwards; "" makes a temporary one
	Keep      bool   // keep the temporary work directory, and everything running until ctx ends
	Devices   int    // 1 to 20
	Timeout   time.Duration
	Rate      int64 // the image server's pace per download, bytes per second; 0: full speed
	ImageSize int64
	// HealthCommand is the devices' commit health check: an argv that runs
	// CheckHealth with these arguments (otasim re-runs itself).
	HealthCommand func(HealthArgs) []string
}

// Check reports what is wrong with the options before anything runs.
func (o Options) Check() error {
	bad := fmt.Errorf
	switch {
	case o.Devices < 1 || o.Devices > 20:
		return bad("--devices %d: want 1 to 20", o.Devices)
	case o.Timeout <= 0:
		return bad("--timeout %v: want a positive duration", o.Timeout)
	case o.Rate < 0:
		return bad("--rate %d: want 0 or more", o.Rate)
	case o.ImageSize < 64<<10 || o.ImageSize > SlotSize:
		return bad("--image-size %d: want 64KiB to 8MiB", o.ImageSize)
	case o.HealthCommand == nil:
		return bad("no health command")
	}
	if o.Dir != "" {
		// Never mix with what is there: the demo writes keys, slots and state.
		ents, err := os.ReadDir(o.Dir)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("--dir %s: %w", o.Dir, err)
		}
		if len(ents) > 0 {
			return bad("--dir %s: not empty", o.Dir)
		}
	}
	return nil
}

// makeDir makes the work directory.
func (o Options) makeDir() (string, error) {
	if o.Dir == "" {
		dir, err := os.MkdirTemp("", "otad-demo-")
		if err != nil {
			return "", fmt.Errorf("work directory: %w", err)
		}
		return dir, nil
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return "", fmt.Errorf("--dir %s: %w", o.Dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("--dir %s: %w", dir, err)
	}
	return dir, nil
}
