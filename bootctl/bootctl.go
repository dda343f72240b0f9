// Package bootctl defines the Bootloader interface the agent uses to flip A/B slots
// (SPEC §6, §7) and the pure, backend-independent boot-selection rules that the
// shipped boot scripts implement. Backends live in sub-packages: uboot, grub, sim.
package bootctl

import (
	"context"
	"errors"
	"fmt"
)

// Slot names (SPEC §1).
const (
	SlotA = "A"
	SlotB = "B"
)

// Slots returns the slot names in canonical order ("A", "B").
func Slots() []string { return []string{SlotA, SlotB} }

var (
	// ErrUnknownSlot is returned (wrapped) for a slot other than "A" or "B".
	ErrUnknownSlot = errors.New("unknown slot")
	// ErrBadEnv is returned (wrapped) when a boot environment cannot be trusted:
	// a failed checksum, a malformed block, or no valid copy at all. Backends never
	// fall back to silent defaults.
	ErrBadEnv = errors.New("bad boot environment")
)

// SlotState is what the bootloader will do with one slot.
type SlotState struct {
	Bootable bool
	// AttemptsLeft is the remaining boot attempts; -1 when the backend has no
	// counter (grub: one try per slot).
	AttemptsLeft int
}

// State is the bootloader's view of both slots.
type State struct {
	// Order is the boot order as the boot script walks it (slot names only).
	Order []string
	Slots map[string]SlotState
}

// Primary is the slot the next boot will pick: the first in Order that is
// Bootable; "" when none is.
func (s State) Primary() string {
	for _, name := range s.Order {
		if st, ok := s.Slots[name]; ok && st.Bootable {
			return name
		}
	}
	return ""
}

// Bootloader is implemented by every backend. Each Mark* is a single
// read-modify-write of the boot environment that leaves unrelated variables alone.
type Bootloader interface {
	State(ctx context.Context) (State, error)
	// MarkBad makes slot unbootable until it is marked active or good again.
	MarkBad(ctx context.Context, slot string) error
	// MarkActive puts slot first in the boot order with the configured attempts.
	MarkActive(ctx context.Context, slot string) error
	// MarkGood commits slot: attempts restored (uboot) / OK=1, TRY=0 (grub).
	MarkGood(ctx context.Context, slot string) error
}

// CheckSlot returns nil for "A" or "B" and an ErrUnknownSlot-wrapped error otherwise.
func CheckSlot(slot string) error {
	if slot == SlotA || slot == SlotB {
		return nil
	}
	return fmt.Errorf("slot %q: %w (want %q or %q)", slot, ErrUnknownSlot, SlotA, SlotB)
}

// Other returns the other slot of an A/B pair ("" for an unknown slot).
func Other(slot string) string {
	switch slot {
	case SlotA:
		return SlotB
	case SlotB:
		return SlotA
	}
	return ""
}
