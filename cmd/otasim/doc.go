// Command otasim runs simulated devices on this machine (docs/contract/commands.md): `otasim
// demo` is the whole flow with embedded parts (docs/operating.md), `otasim fleet` a fleet
// of simulated devices in one process (docs/contract/fleet-sim.md). Each subcommand is one entry of
// commands().
package main
