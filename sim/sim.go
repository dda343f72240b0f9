package sim

import (
	"context"
	"io"

	"github.com/otad/otad/internal/cli"
)

// Run is otasim: args are the command line after the program's name.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return Program("").Run(ctx, args, stdout, stderr)
}

// Program is otasim as cmd/otasim runs it: with the build's version
// (`otasim --version`).
func Program(version string) cli.Program {
	return cli.Program{Name: "otasim", Commands: commands(), Version: version, Notes: []string{"Exit codes: 0 ok, 1 failure, 2 usage."}}
}

// commands is the subcommand table.
func commands() map[string]cli.Command {
	return map[string]cli.Command{
		"demo":  {Summary: "the whole flow on this machine: broker, image server, 5 simulated devices", Run: runDemo},
		"fleet": {Summary: "N simulated devices in this process, real agents with slots in memory, on a broker", Run: runFleet},
	}
}
