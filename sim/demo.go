package sim

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/otad/otad/internal/cli"
	"github.com/otad/otad/sim/demo"
)

// runDemo is `otasim demo`, and the hidden `otasim demo health-check`.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "health-check" {
		return healthCheck(args[1:], stdout, stderr)
	}
	return runDemoFlow(ctx, args, stdout, stderr)
}

// healthCheck is the simulated devices' commit health check (not for
// people): it passes when the booted slot holds a good demo image.
func healthCheck(args []string, stdout, stderr io.Writer) error {
	fset := cli.NewFlagSet("otasim demo health-check", "--env FILE --slot-a PATH --slot-b PATH (run by the demo's devices)", stderr)
	env := fset.String("env", "", "the sim bootloader's state file (bootloader.env_file)")
	attempts := fset.Int("attempts", 3, "bootloader.attempts")
	slotA := fset.String("slot-a", "", "slot A's file")
	slotB := fset.String("slot-b", "", "slot B's file")
	if err := cli.ParseNone(fset, args); err != nil {
		return err
	}
	if *env == "" || *slotA == "" || *slotB == "" {
		return cli.Usagef("want --env, --slot-a and --slot-b")
	}
	slot, err := demo.CheckHealth(demo.HealthArgs{EnvFile: *env, Attempts: *attempts, Slots: map[string]string{"A": *slotA, "B": *slotB}})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "slot %s runs a good image\n", slot)
	return nil
}

// healthCommand is the argv of healthCheck: the devices run this very
// program again.
func healthCommand(exe string) func(demo.HealthArgs) []string {
	return func(a demo.HealthArgs) []string {
		return []string{exe, "demo", "health-check", "--env", a.EnvFile, "--attempts", strconv.Itoa(a.Attempts),
			"--slot-a", a.Slots["A"], "--slot-b", a.Slots["B"]}
	}
}

// runDemoFlow is `otasim demo` (docs/operating.md).
func runDemoFlow(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o demo.Options
	fset := cli.NewFlagSet("otasim demo", "[--dir DIR] [--keep] [flags]", stderr)
	fset.StringVar(&o.Dir, "dir", "", "work directory (must be empty or absent; kept afterwards) (default: a temporary directory)")
	fset.BoolVar(&o.Keep, "keep", false, "keep the temporary work directory (keys, images, device slots, logs), and the devices, broker and dashboard running until interrupted")
	fset.IntVar(&o.Devices, "devices", 5, "number of simulated devices (1-20)")
	fset.DurationVar(&o.Timeout, "timeout", 90*time.Second, "give up when a step has not converged after this long")
	rate := fset.String("rate", "512KiB", "download speed cap per device, per second (0: none)")
	size := fset.String("image-size", "4MiB", "size of the demo images (at most 8MiB, the slot size)")
	if err := cli.ParseNone(fset, args); err != nil {
		return err
	}
	var err error
	if o.Rate, err = cli.ParseBytes(*rate); err != nil {
		return cli.Usagef("--rate: %w", err)
	}
	if o.ImageSize, err = cli.ParseBytes(*size); err != nil {
		return cli.Usagef("--image-size: %w", err)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("the devices' health check runs otasim itself: %w", err)
	}
	o.HealthCommand = healthCommand(exe)
	if err := o.Check(); err != nil {
		return cli.UsageError{Err: err}
	}
	return demo.Run(ctx, o, stdout)
}
