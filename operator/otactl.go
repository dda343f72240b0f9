package operator

import (
	"context"
	"errors"
	"io"

	"github.com/otad/otad/internal/cli"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/rollout"
)

// commands is the subcommand table; a new subcommand is one more entry.
func commands() map[string]cli.Command {
	return map[string]cli.Command{
		"keygen":     {Summary: "write a signing key pair NAME.key / NAME.pub", Run: keygen},
		"sign":       {Summary: "sign an image into an offer envelope (stdout)", Run: sign},
		"verify":     {Summary: "check an envelope offline and print its manifest", Run: verifyEnvelope},
		"publish":    {Summary: "publish an envelope as a device's or group's desired state (MQTT)", Run: publish},
		"status":     {Summary: "fleet table from the MQTT status topics", Run: status},
		"dashboard":  {Summary: "the fleet and its rollouts as a live web page", Run: dashboardCmd},
		"rollout":    {Summary: "staged rollouts", Sub: rolloutCommands()},
		"root":       {Summary: "the root of trust", Sub: rootCommands()},
		"completion": {Summary: "print the completion script of a shell: bash, zsh or fish", Run: completion},
	}
}

// program is otactl: its commands and its exit codes (docs/contract/commands.md), where a
// coded error is a refused offer and 4 (busy) is a rollout another
// controller holds or took over.
func program() cli.Program {
	return cli.Program{
		Name:     "otactl",
		Commands: commands(),
		Notes:    []string{cli.ExitNote(exitCodes)},
		Code: func(err error) int {
			switch {
			case ota.CodeOf(err) != "":
				return ota.ExitRefused
			case errors.Is(err, rollout.ErrLeaseHeld) || errors.Is(err, rollout.ErrLeaseLost) || errors.Is(err, rollout.ErrGroupBusy):
				return ota.ExitBusy
			case errors.As(err, new(*rollout.BrokerQueueError)):
				return ota.ExitUsage // the plan does not fit the broker's queue as stated
			}
			return ota.ExitFailure
		},
	}
}

// Program is otactl as cmd/otactl runs it: with the build's version
// (`otactl --version`).
func Program(version string) cli.Program {
	p := program()
	p.Version = version
	return p
}

// Run runs the command line args (without the program name) and returns the
// exit code of docs/contract/commands.md. The demo runs the operator's commands through it too.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return program().Run(ctx, args, stdout, stderr)
}
