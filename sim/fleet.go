package sim

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/otad/otad/internal/cli"
	"github.com/otad/otad/sim/fleet"
)

// runFleet is `otasim fleet` (docs/contract/fleet-sim.md): it runs until interrupted.
func runFleet(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o fleet.Options
	fset := cli.NewFlagSet("otasim fleet", "--broker URL --devices N (--keys DIR | --root FILE) [flags]", stderr)
	var brokers cli.StringList
	fset.Var(&brokers, "broker", "MQTT broker URL (mqtt://host:port); again for each node of a cluster: each device starts at a random one and fails over")
	fset.IntVar(&o.Devices, "devices", 0, "number of simulated devices")
	fset.StringVar(&o.KeysDir, "keys", "", "directory of the public keys the devices trust")
	fset.StringVar(&o.Root, "root", "", "instead of --keys, the root of trust the devices ship ([trust] root); each takes newer roots retained over MQTT")
	fset.StringVar(&o.Prefix, "prefix", "sim-", "device IDs are PREFIX plus a 5-digit number from 00001")
	fset.StringVar(&o.Group, "group", "", "the group every device is in (default: none)")
	fset.StringVar(&o.Compatible, "compatible", "otasim", "the devices' compatible string")
	fset.Float64Var(&o.FailHealth, "fail-health", 0, "percent of devices whose health check fails (the same devices every run: a hash of the ID)")
	failIDs := fset.String("fail-devices", "", "comma-separated IDs of devices whose health check fails, besides those of --fail-health")
	fset.IntVar(&o.MaxInstalls, "max-installs", fleet.DefaultMaxInstalls, "installs at once, at most (each holds its image and pipeline buffers while it runs)")
	slotSize := fset.String("slot-size", "1GiB", "each slot's capacity (costs no memory)")
	fset.DurationVar(&o.Spread, "spread", 0, "devices power on and connect at random times within this (default: 1ms per device)")
	fset.DurationVar(&o.Commit, "commit-window", 30*time.Second, "the devices' commit window")
	verbose := fset.Bool("v", false, "log the agents' info messages to stderr (default: warnings and errors)")
	if err := cli.ParseNone(fset, args); err != nil {
		return err
	}
	switch len(brokers) {
	case 0:
	case 1:
		o.Broker = brokers[0]
	default:
		o.Brokers = brokers
	}
	if len(brokers) == 0 || (o.KeysDir == "") == (o.Root == "") || o.Devices < 1 {
		return cli.Usagef("want --broker, --devices and one of --keys and --root")
	}
	var err error
	if o.SlotSize, err = cli.ParseBytes(*slotSize); err != nil {
		return cli.Usagef("--slot-size: %w", err)
	}
	if *failIDs != "" {
		o.FailIDs = strings.Split(*failIDs, ",")
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	o.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	return fleet.Serve(ctx, o, stdout)
}
