package sim

import (
	"context"

	"github.com/otad/otad/internal/cli"
)

// Manual is otasim's man page and completions: the command table walked
// (cli.Program.Manual) and this prose.
func Manual(ctx context.Context, version string) (cli.Manual, error) {
	// BuildVersion: a version is never empty, so the version command is
	// always listed (completion runs without one).
	return Program(cli.BuildVersion(version)).Manual(ctx, cli.Manual{
		Name:     "otasim",
		Section:  "1",
		Title:    "simulated otad devices, for trying updates and rollouts",
		Version:  version,
		Synopsis: "COMMAND [flags]",
		Description: []string{
			"otasim runs otad's real agent on simulated devices whose slots are files or memory and whose bootloader is simulated: the whole update flow on one machine (demo), or a fleet of devices on an MQTT broker to try a rollout on before it reaches real devices (fleet). It is not part of a device.",
		},
		Exit: []cli.Item{{Term: "0", Text: "ok"}, {Term: "1", Text: "failure"}, {Term: "2", Text: "usage"}},
		Examples: []cli.Item{
			{Term: "otasim demo", Text: "The whole flow on this machine: an embedded broker, an image server, five devices, a release and a rollout."},
			{Term: "otasim fleet --broker mqtt://localhost:1883 --devices 1000 --keys keys/", Text: "A thousand simulated devices on a broker, trusting the keys in keys/."},
		},
		SeeAlso: []string{"otactl(1)", "otad(8)"},
	})
}
