// Command otasim runs simulated devices on this machine (SPEC §9): `otasim
// demo` is the whole flow with embedded parts (§11), `otasim fleet` a fleet
// of simulated devices in one process (§14). Each subcommand is one entry of
// commands().
package main
