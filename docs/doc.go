// Package docs holds otad's documentation (Markdown, beside this file) and the
// test that keeps it true. The test reads the code's own declarations — the
// vocabulary package's constants and report types, the journal, the config
// struct, the command tables — and fails when the contract misses a state,
// result, code, compression, slot state, exit code, report field, journal key,
// config key or subcommand, when design.md misses a package, or when a link
// between the pages is broken. It has no code of its own.
package docs
