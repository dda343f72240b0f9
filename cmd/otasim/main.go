// Command otasim runs simulated devices on this machine (SPEC §9): `otasim
// demo` is the whole flow with embedded parts (§11). Each subcommand is one
// entry of commands(); the fleet simulator of §14 will be another.
package main

import (
	"context"
	"io"

	"github.com/otad/otad/internal/cli"
)

func main() { cli.Main(run) }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return cli.Program{Name: "otasim", Commands: commands()}.Run(ctx, args, stdout, stderr)
}

// commands is the subcommand table.
func commands() map[string]cli.Command {
	return map[string]cli.Command{
		"demo": {Summary: "the whole flow on this machine: broker, image server, 5 simulated devices", Run: runDemo},
	}
}
