package agent

import (
	"time"

	"github.com/otad/otad/ota"
)

// Effect is an instruction to the loop. Effects run in order; the first that
// fails stops the rest of its batch and comes back as EvEffectFailed.
type Effect interface{ isEffect() }

// effect is embedded in every Effect type; it makes them, and only them, Effects.
type effect struct{}

func (effect) isEffect() {}

// Persist writes the journal; the loop stops (and the process exits) if it cannot.
type Persist struct {
	effect
	State State
}

// Emit publishes a transition: the status snapshot of State, and Event,
// which the loop stamps with device, boot and time (Step reads no clock).
type Emit struct {
	effect
	Event ota.Event
	State State // the state after the transition
}

// Mark changes the bootloader's view of a slot.
type Mark struct {
	effect
	Op   MarkOp
	Slot ota.Slot
}

// MarkOp is one of the three bootloader operations of docs/contract/bootloaders.md.
type MarkOp string

const (
	MarkBad    MarkOp = "bad"
	MarkActive MarkOp = "active"
	MarkGood   MarkOp = "good"
)

// StartInstall starts the streaming writer for Target into Target.Slot.
type StartInstall struct {
	effect
	Gen    uint64
	Target Target
	// Booted is what the booted slot holds: a chunked payload reuses it.
	Booted SlotInfo
}

// CancelInstall stops the running writer and waits for it to stop.
type CancelInstall struct{ effect }

// Reboot reboots the device.
type Reboot struct{ effect }

// RecheckPending has the loop run the offer checks on the pending offer
// again and step with the verdict (EvPendingOffer or EvRefused).
type RecheckPending struct{ effect }

// StartHealth runs the health checks within what is left of the commit
// window: Used of it has run already (docs/contract/installing.md), on the
// boot clock; an agent restarted in confirming has only the rest. Since is
// the first start on the new slot by the wall clock, for the messages.
type StartHealth struct {
	effect
	Used  time.Duration
	Since time.Time
}

// PublishProgress reports bytes done (not journaled).
type PublishProgress struct {
	effect
	Target Target
	ota.Progress
}

// RetryLater has the loop step EvRetry with Target after a jittered backoff
// (docs/contract/installing.md, [retry] in docs/contract/config.md): Target
// ended retryable, and Target.Try is the retry to come (1 for the first).
// A timer does not outlive the process: after a restart the ending stays
// retryable for an explicit act.
type RetryLater struct {
	effect
	Target Target
}
