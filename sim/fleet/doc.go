// Package fleet runs a simulated fleet in one process (docs/contract/fleet-sim.md, `otasim
// fleet`): N real agents held in memory (sim/device's MemDevice),
// sharing what an idle device need not own, connecting over a spread of
// time as a real fleet does, installing at most a bounded number at once.
package fleet
