// Package cli is the command-line scaffolding that otactl, otasim and the
// benchmarks share: a subcommand table and its usage, flag sets that take
// flags after positional arguments, usage errors, and the mapping of errors
// to the exit codes of docs/contract/commands.md, and byte counts (ParseBytes). otad keeps its own, smaller one: it is the
// device's binary and its commands share a config file rather than flags.
package cli
