package ota

import "time"

// Phase is an install state; the strings are stable (status "state", events "from"/"to").
type Phase string

// The install phases, in the order an install walks them.
const (
	Idle        Phase = "idle"
	Downloading Phase = "downloading"
	Verifying   Phase = "verifying"
	Staged      Phase = "staged"
	Rebooting   Phase = "rebooting"
	Confirming  Phase = "confirming"
)

// Valid reports whether p is one of the six phases.
func (p Phase) Valid() bool {
	switch p {
	case Idle, Downloading, Verifying, Staged, Rebooting, Confirming:
		return true
	}
	return false
}

// Result is what an offer came to.
type Result string

// The results an offer ends with.
const (
	ResultSuccess    Result = "success"
	ResultFailed     Result = "failed"
	ResultRolledBack Result = "rolled_back"
	ResultSuperseded Result = "superseded"
	ResultRejected   Result = "rejected"
	ResultUpToDate   Result = "up_to_date"
)

// Answers of a local install (`otad install`) that are not ends: the boot
// slot was flipped, or the offer waits behind an install past the flip.
const (
	ResultStaged  Result = "staged"
	ResultPending Result = "pending"
)

// ExitCode is the exit status of `otad install` for a result.
func (r Result) ExitCode() int {
	switch r {
	case ResultStaged, ResultPending, ResultUpToDate, ResultSuccess:
		return ExitOK
	case ResultRejected:
		return ExitRefused
	default:
		return ExitFailure
	}
}

// Outcome is one offer's result record: the journal's and the status
// snapshot's last_result, and the answer to a local install.
type Outcome struct {
	ID     string `json:"id"`
	SHA256 string `json:"sha256,omitempty"`
	// ManifestSHA256 names the offer, as in Refusal (refused or ended).
	ManifestSHA256 string `json:"manifest_sha256,omitempty"`
	// IssuedAt tells a redelivery of the offer from a newer one; the journal
	// keeps it, the status snapshot leaves it out.
	IssuedAt time.Time `json:"issued_at,omitzero"`
	Result   Result    `json:"result"`
	Code     Code      `json:"code,omitempty"`
	Message  string    `json:"message,omitempty"`
	// Transfer is what the offer's install fetched and reused, when it ran.
	Transfer
	// Retryable says the offer may start again (docs/contract/installing.md):
	// the slot was never marked and the same bytes may yet succeed.
	Retryable bool `json:"retryable,omitempty"`
	// Retrying says the agent retries this ending by itself: a retry timer
	// is armed, so it is not the offer's end yet (docs/contract/installing.md,
	// the automatic retry; docs/contract/rollouts.md, rule 3). It is cleared
	// when the retry starts or is dropped, and on the agent's start.
	Retrying bool `json:"retrying,omitempty"`
	// Time is when the offer ended, by the wall clock (shown only, never
	// decided by); zero in a journal written before it was kept.
	Time time.Time `json:"time,omitzero"`
	// AlreadyEnded says, in the answer to a local install only (never in
	// the status or the journal), that the offer had ended before and was
	// not tried again: its ending is final (docs/contract/installing.md),
	// and Result, Code and Message are that earlier ending's.
	AlreadyEnded bool `json:"already_ended,omitempty"`
}

// ExitCode is the exit status of `otad install` for this outcome.
func (o Outcome) ExitCode() int { return o.Result.ExitCode() }
