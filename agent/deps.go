package agent

import (
	"context"
	"errors"
	"time"

	"github.com/otad/otad/ota"
)

// Store keeps the journal. Journal is the real one; tests wrap it to crash.
type Store interface {
	Load() (State, bool, error)
	Save(State) error
}

// Bootloader is what the agent needs of a boot loader backend (docs/contract/bootloaders.md).
type Bootloader interface {
	MarkBad(ctx context.Context, slot ota.Slot) error
	MarkActive(ctx context.Context, slot ota.Slot) error
	MarkGood(ctx context.Context, slot ota.Slot) error
	// Order is the boot order, first slot first.
	Order(ctx context.Context) ([]ota.Slot, error)
}

// Installer writes a target's payload into target.Slot and verifies it.
// It reports progress (phase, image bytes written or read back, where the
// bytes came from so far) without blocking and returns an *ota.Error on
// failure.
type Installer interface {
	Install(ctx context.Context, job InstallJob, progress func(ota.Progress)) error
}

// InstallJob is one install: the target, and what the booted slot holds
// (a chunked payload reuses its chunks, docs/contract/chunked.md).
type InstallJob struct {
	Target Target
	Booted SlotInfo
}

// Checker runs the offer checks of docs/contract/checks.md and turns a valid offer into a
// Target. A refusal is an *ota.Error carrying its code.
type Checker interface {
	Check(raw []byte, facts Facts) (Target, error)
}

// TrustChecker is what a Checker may also do: check an accepted offer's
// signatures again with the keys trusted now. The loop runs it just before
// the boot slot changes (docs/contract/trust.md): a release key revoked
// while the image was downloading must not get its image booted.
type TrustChecker interface {
	CheckTrust(raw []byte) error
}

// Facts are what the offer checks need from the agent's state.
type Facts struct {
	SecurityFloor  uint64
	NewestIssuedAt time.Time
	InactiveSlot   ota.Slot
	// ClockFloor is the earliest the checks' clock may read (docs/contract/checks.md).
	ClockFloor time.Time
	// PayloadGiven says a person gave the payload's place (otad install
	// --payload): the signed URLs are never fetched, so the scheme rule
	// does not apply; the signed size and hashes bind the bytes.
	PayloadGiven bool
}

// Rebooter reboots the device. ErrRebooted means the process must end now
// (the sim bootloader, or an in-process install); nil means the OS is taking
// the system down and will stop the agent.
type Rebooter interface {
	Reboot(ctx context.Context) error
}

// ErrRebooted ends Run cleanly after a reboot that ends this process.
var ErrRebooted = errors.New("rebooted")

// HealthChecker decides whether the new slot is healthy enough to commit.
type HealthChecker interface {
	Check(ctx context.Context) error
}

// Publisher receives every transition and progress report. It must not block:
// a slow broker never stalls the state machine.
type Publisher interface {
	Publish(st ota.Status, ev ota.Event)
	Progress(p ota.Progress)
}

// Clock stamps records; tests pin it.
type Clock interface{ Now() time.Time }

// SystemClock is the real clock.
type SystemClock struct{}

// Now is time.Now in UTC.
func (SystemClock) Now() time.Time { return time.Now().UTC() }
