package operator

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/otad/otad/internal/cli"
)

// exitCodes are otactl's exit codes (docs/contract/commands.md): the help's
// note and the man page's EXIT STATUS.
var exitCodes = []cli.Item{
	{Term: "0", Text: "ok"},
	{Term: "1", Text: "failure"},
	{Term: "2", Text: "usage"},
	{Term: "3", Text: "offer refused (verify: the envelope fails a check; its code is printed)"},
	{Term: "4", Text: "rollout held by another controller, or its group in another rollout that a controller runs"},
}

// Manual is otactl's man page and completions: the command table walked
// (cli.Program.Manual) and this prose.
func Manual(ctx context.Context, version string) (cli.Manual, error) {
	// BuildVersion: a version is never empty, so the version command is
	// always listed (completion runs without one).
	return Program(cli.BuildVersion(version)).Manual(ctx, cli.Manual{
		Name:     "otactl",
		Section:  "1",
		Title:    "the operator side of otad: keys, signing, publishing, rollouts",
		Version:  version,
		Synopsis: "COMMAND [flags] [args]",
		Description: []string{
			"otactl makes signing keys, signs OS images into offer envelopes, checks envelopes offline, publishes them to devices over MQTT, shows the fleet, and runs staged rollouts. Flags may come before or after the arguments, with one dash or two.",
			"The devices run otad(8). Offers, envelopes, rollout plans and the MQTT topics are described in /usr/share/doc/otactl/contract/ and at https://github.com/otad/otad/tree/main/docs.",
		},
		Env: []cli.Item{
			{Term: passwordEnv, Text: "the MQTT password, in place of --password (which ps shows)"},
			{Term: "USER", Text: "who paused, resumed or aborted a rollout, and who holds its lease, in the rollout's history"},
		},
		Exit: exitCodes,
		Examples: []cli.Item{
			{Term: "otactl keygen release", Text: "Make a signing key pair: release.key (keep it secret) and release.pub (for the devices' /etc/otad/keys.d)."},
			{Term: "otactl sign --key release.key --image rootfs.img --version 4.3.0 \\\n    --compatible acme,gw-v2 --url https://updates.example/rootfs.img >offer.json", Text: "Sign an image into an offer envelope."},
			{Term: "otactl verify --pub release.pub offer.json", Text: "Check the envelope offline and print its manifest."},
			{Term: "otactl publish --broker mqtts://broker:8883 --group gw-v2 offer.json", Text: "Offer it to a group of devices."},
			{Term: "otactl status --broker mqtts://broker:8883", Text: "The fleet: each device's slots, state and last result."},
			{Term: "otactl rollout check plan.toml\notactl rollout start --broker mqtts://broker:8883 plan.toml", Text: "Check a staged rollout's plan, then run it."},
		},
		SeeAlso: []string{"otad(8)"},
	})
}

// completion prints the completion script of a shell.
func completion(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("completion", strings.Join(cli.Shells, "|"), stderr)
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("want one shell: %s", strings.Join(cli.Shells, ", "))
	}
	m, err := Manual(ctx, "")
	if err != nil {
		return fmt.Errorf("reading the command table: %w", err)
	}
	return m.Completion(stdout, pos[0])
}
