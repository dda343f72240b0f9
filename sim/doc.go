// Package sim is otasim's body: simulated devices on this machine
// (docs/contract/commands.md). `otasim demo` is the whole flow with embedded
// parts (docs/operating.md), `otasim fleet` a fleet of simulated devices in one
// process (docs/contract/fleet-sim.md). Each subcommand is one entry of
// commands(); cmd/otasim only calls Run. The parts are sim/demo, sim/device and
// sim/fleet. Nothing of the device's binary imports this room.
package sim
