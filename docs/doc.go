// Package docs holds otad's documentation (Markdown, beside this file) and the
// test that keeps it true: every state, result, failure code, config key and
// subcommand the code defines must appear in the contract, and every link
// between the pages must resolve. It has no code of its own.
package docs
