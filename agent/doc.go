// Package agent holds otad's install state machine, its journal and the loop
// that runs it.
//
// The machine (Step) is pure: an event and the state in, the new state and a
// list of effects out, with no I/O and no clock. Its pieces: events.go (the
// inputs), effects.go (the instructions out), machine.go (Step, transitions),
// boot.go (what a start finds), offer.go (taking an offer), settle.go (commit,
// rejection, fallback, operator marks, failed effects), retry.go (retryable
// endings and how they start again), undo.go (otad cancel, mark-active).
//
// The loop (Agent) owns the state in one goroutine: agent.go (New, Run),
// inbox.go and intake.go (offers queued and checked), exec.go (carrying out
// effects, the writer and health workers, publishing), waiters.go (answering
// local installs), retryloop.go (the retry timer). Disk, network,
// bootloader and clock sit behind the small interfaces of deps.go; the
// journal is journal.go; status.go renders the status snapshot.
package agent
