// Package controller is the rollout controller, in one room: everything
// of a rollout that meets the world (docs/contract/rollouts.md). The
// rules it carries out are rollout's, which stays pure.
//
// Run is the one entry (otactl rollout start calls it): it reads the lease
// before connecting as the rollout's controller (lease.go: refused,
// waited out, or its holder proven gone), opens the sessions (start.go:
// the primary one for statuses, the rollout's topics and offers; one per
// broker node for the state when there are several), and hands them to
// the Driver (driver.go), which starts from the retained state or records
// a new one, then feeds rollout.Step and carries out its actions. It
// adopts a state only once the broker has it and publishes offers only
// after the state naming their devices, so a controller killed at any
// point starts again from the retained state alone. An Inbox (inbox.go)
// hears the rollout's own topics (the retained state, the records, the
// operator's commands); a Tracker (tracker.go) follows the devices'
// statuses and an Observer (observer.go) says when that view is ready to
// be judged. ReadState and ReadRecords (read.go) read a rollout for the
// other commands (status, list, pause/resume/abort).
package controller
