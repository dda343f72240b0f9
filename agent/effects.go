package agent

import "github.com/otad/otad/ota"

// Effect is an instruction to the loop. Effects run in order; the first that
// fails stops the rest of its batch and comes back as EvEffectFailed.
type Effect interface{ isEffect() }

// Persist writes the journal; the loop stops (and the process exits) if it cannot.
type Persist struct{ State State }

// Emit publishes a transition: the status snapshot of State, and Event,
// which the loop stamps with device, boot and time (Step reads no clock).
type Emit struct {
	Event ota.Event
	State State // the state after the transition
}

// Mark changes the bootloader's view of a slot.
type Mark struct {
	Op   MarkOp
	Slot ota.Slot
}

// MarkOp is one of the three bootloader operations of SPEC §7.
type MarkOp string

const (
	MarkBad    MarkOp = "bad"
	MarkActive MarkOp = "active"
	MarkGood   MarkOp = "good"
)

// StartInstall starts the streaming writer for Target into Target.Slot.
type StartInstall struct {
	Gen    uint64
	Target Target
}

// CancelInstall stops the running writer and waits for it to stop.
type CancelInstall struct{}

// Reboot reboots the device.
type Reboot struct{}

// RecheckPending has the loop run the offer checks on the pending offer
// again and step with the verdict (EvPendingOffer or EvRefused).
type RecheckPending struct{}

// StartHealth runs the health checks within the commit window.
type StartHealth struct{}

// PublishProgress reports bytes done (not journaled).
type PublishProgress struct {
	Target           Target
	BytesDone, Total int64
}

func (Persist) isEffect() {}

func (Emit) isEffect() {}

func (Mark) isEffect() {}

func (StartInstall) isEffect() {}

func (CancelInstall) isEffect() {}

func (Reboot) isEffect()         {}
func (RecheckPending) isEffect() {}

func (StartHealth) isEffect() {}

func (PublishProgress) isEffect() {}
