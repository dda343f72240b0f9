// Command otasim runs simulated devices on this machine (docs/contract/commands.md);
// its body is package sim.
package main

import (
	"github.com/otad/otad/internal/cli"
	"github.com/otad/otad/sim"
)

func main() { cli.Main(sim.Run) }
