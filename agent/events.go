package agent

import (
	"time"

	"github.com/otad/otad/ota"
)

// Event is an input to Step: one of the Ev types below.
type Event interface{ isEvent() }

// event is embedded in every Ev type; it makes them, and only them, Events.
type event struct{}

func (event) isEvent() {}

// EvBoot is the first event of every agent start: which slot runs and which boot this is.
type EvBoot struct {
	event
	Booted ota.Slot
	BootID string
	// FirstInOrder is the slot the bootloader's order names first, read
	// before the event when it matters (a journal left in staged).
	FirstInOrder ota.Slot
	// Time is when the agent started (the clock, never below its floor),
	// for display.
	Time time.Time
	// Uptime is the boot clock at the start: the commit window counts the
	// new slot's running time on it, never on the wall clock.
	Uptime time.Duration
}

// EvRunning is the boot clock read while the health check runs: the
// running time is journaled now and then, so a reboot while confirming
// keeps what the boot before it ran.
type EvRunning struct {
	event
	Uptime time.Duration
}

// EvOffer is an offer that passed every check of docs/contract/checks.md.
// Local says a person handed it to this device (otad install): that is an
// explicit act, which reopens a retryable ending (docs/contract/installing.md);
// a message from the network reopens one only with a greater Target.Retry.
type EvOffer struct {
	event
	Target Target
	Local  bool
}

// EvPendingOffer is the pending offer, passed again as it is taken up.
type EvPendingOffer struct {
	event
	Target Target
}

// EvRefused is an offer that failed a check. Outcome names the offer when
// it is authentic, and says why it was refused; Time is when. Pending says
// it is the pending offer, refused by its re-check.
type EvRefused struct {
	event
	Outcome ota.Outcome
	Time    time.Time
	Pending bool
}

// EvProgress reports the writer's progress; Phase verifying moves the state on.
type EvProgress struct {
	event
	Gen uint64
	ota.Progress
}

// EvInstallDone ends a write: Code is empty on success.
type EvInstallDone struct {
	event
	// Transfer is what the install fetched and reused in all.
	ota.Transfer
	Gen     uint64
	Code    ota.Code
	Message string
}

// EvHealth is the health check's verdict during confirming.
type EvHealth struct {
	event
	OK      bool
	Message string
}

// EvMarkGood and EvMarkBad are the operator's manual commit and rollback.
type (
	EvMarkGood struct{ event }
	EvMarkBad  struct{ event }
)

// EvCancel is `otad cancel`: the running download or install stops.
type EvCancel struct{ event }

// EvMarkActive is `otad mark-active booted|other` (RAUC's mark-active):
// Other switches the boot slot to the other slot's verified image; else the
// booted slot is made active again, dropping a staged one.
type EvMarkActive struct {
	event
	Other bool
}

// EvRetry is a RetryLater timer run out: Target is the offer, checked again
// by the loop, and Target.Try the try it starts.
type EvRetry struct {
	event
	Target Target
	// Dropped says the loop could not start it (the envelope is no longer
	// held, or its re-check refused it): the ending stays, no longer retrying.
	Dropped bool
}

// EvEffectFailed reports that a bootloader effect could not be carried out.
type EvEffectFailed struct {
	event
	Effect  Effect
	Message string
	// Code is the failure's code when the effect gave one (a flip refused
	// by the trust check: bad_signature); write_failed otherwise.
	Code ota.Code
}
