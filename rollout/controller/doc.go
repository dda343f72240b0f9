// Package controller is the rollout controller, in one room: everything
// of a rollout that meets the world (docs/contract/rollouts.md). The
// rules it carries out are rollout's, which stays pure.
//
// Run is the one entry (otactl rollout start calls it): it reads the lease
// (lease.go: refused, waited out, or its holder proven gone), opens the
// sessions (start.go: the primary one for statuses and the rollout's
// topics; one per broker node for the state when there are several),
// claims the lease through them under client IDs of their own, and only
// once the claim is read back connects as the rollout's controller (the
// client ID every controller of it shares) to publish. The Driver
// (driver.go) starts from the retained state or records a new one, then
// feeds rollout.Step and carries out its actions. It
// adopts a state only once the broker has it and publishes offers only
// after the state naming their devices, so a controller killed at any
// point starts again from the retained state alone. An Inbox (inbox.go)
// hears the rollout's own topics (the retained state, the records, the
// operator's commands); a Tracker (tracker.go) follows the devices'
// statuses and an Observer (observer.go) says when that view is ready to
// be judged. ReadState and ReadRecords (read.go) read a rollout for the
// other commands (status, list, pause/resume/abort). What it publishes
// under {prefix}/rollouts/ is signed with the operator key, and what it
// reads there counts only when a trusted operator key signed it
// (rollout.Trust); anything else is reported and taken for absent.
package controller
