package bootctl

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/otad/otad/ota"
)

// DefaultOrder is the boot order the shipped boot scripts assume when the
// environment names none.
const DefaultOrder = "A B"

var (
	// ErrUnknownSlot is returned (wrapped) for a slot other than "A" or "B".
	ErrUnknownSlot = errors.New("unknown slot")
	// ErrBadEnv is returned (wrapped) when a boot environment cannot be trusted:
	// a failed checksum, a malformed block, or no valid copy at all. Backends never
	// fall back to silent defaults.
	ErrBadEnv = errors.New("bad boot environment")
)

// BootEntry is the bootloader's entry for one slot: whether it will boot
// it, and how many tries are left. (ota.SlotState is what otad knows of a
// slot's contents: staged, good, bad.)
type BootEntry struct {
	Bootable bool
	// AttemptsLeft is the remaining boot attempts; -1 when the backend has no
	// counter (grub: one try per slot).
	AttemptsLeft int
}

// State is the bootloader's view of both slots.
type State struct {
	// Order is the boot order as the boot script walks it (slot names only).
	Order []ota.Slot
	Slots map[ota.Slot]BootEntry
}

// Primary is the slot the next boot will pick: the first in Order that is
// Bootable; "" when none is.
func (s State) Primary() ota.Slot {
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
	// MarkBad makes slot unbootable and takes it out of the boot order (as
	// RAUC does) until it is marked active again.
	MarkBad(ctx context.Context, slot ota.Slot) error
	// MarkActive puts slot first in the boot order with the configured attempts.
	MarkActive(ctx context.Context, slot ota.Slot) error
	// MarkGood commits slot: attempts restored (uboot) / OK=1, TRY=0 (grub).
	MarkGood(ctx context.Context, slot ota.Slot) error
}

// CheckSlot returns nil for "A" or "B" and an ErrUnknownSlot-wrapped error otherwise.
func CheckSlot(slot ota.Slot) error {
	if slot.Valid() {
		return nil
	}
	return fmt.Errorf("slot %q: %w (want %q or %q)", slot, ErrUnknownSlot, ota.SlotA, ota.SlotB)
}

// OrderWithout returns the words of a boot order other than slot, in order (an
// empty order is DefaultOrder). Mark bad writes what is left, mark active puts
// the slot in front of it, as RAUC's U-Boot backend does; words that name no
// slot of ours stay, as RAUC keeps them.
func OrderWithout(order string, slot ota.Slot) []string {
	if strings.TrimSpace(order) == "" {
		order = DefaultOrder
	}
	var rest []string
	for _, w := range strings.Fields(order) {
		if w != string(slot) {
			rest = append(rest, w)
		}
	}
	return rest
}

// OrderSlots returns the slots a boot order names, in order, once each; the
// boot scripts split it on blanks like any shell word list and skip words
// that name no slot.
func OrderSlots(order string) []ota.Slot {
	var out []ota.Slot
	seen := map[ota.Slot]bool{}
	for _, f := range strings.Fields(order) {
		if w := ota.Slot(f); w.Valid() && !seen[w] {
			seen[w] = true
			out = append(out, w)
		}
	}
	return out
}
