// Command otasim runs simulated devices on this machine (docs/contract/commands.md);
// its body is package sim.
package main

import (
	"github.com/otad/otad/internal/cli"
	"github.com/otad/otad/sim"
)

// version is set at build time with -ldflags "-X main.version=..." (make
// build: packaging/version), the same string as otad's and the package's.
var version string

func main() { cli.Main(sim.Program(cli.BuildVersion(version)).Run) }
