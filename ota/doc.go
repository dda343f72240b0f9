// Package ota is the vocabulary of the update contract, defined once: slot
// names, install phases, results, failure and refusal codes, compressions,
// exit codes, the coded error that carries a code, and the messages a device
// reports (status snapshot, event, progress).
//
// It is a leaf: it imports only the standard library, so every layer can use
// it — the agent, the verifier, the slot writer, the bootloader backends, the
// transport, and the operator tools that read what devices report — without
// one pulling in another. The strings here are part of the external contract
// (status JSON, events, journal, CLI output); changing one is a protocol change.
package ota
