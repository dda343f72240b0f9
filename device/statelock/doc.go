// Package statelock holds the exclusive lock on otad's state directory: the
// one thing that keeps two processes from writing a slot or the boot env at
// once (docs/contract/installing.md).
package statelock
