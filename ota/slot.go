package ota

import "fmt"

// Slot names one of the two A/B slots.
type Slot string

// The two slots.
const (
	SlotA Slot = "A"
	SlotB Slot = "B"
)

// Slots returns both slot names in canonical order.
func Slots() []Slot { return []Slot{SlotA, SlotB} }

// Other returns the other slot of the pair: A for B, B for A, "" for anything else.
func (s Slot) Other() Slot {
	switch s {
	case SlotA:
		return SlotB
	case SlotB:
		return SlotA
	}
	return ""
}

// Valid reports whether s is A or B.
func (s Slot) Valid() bool { return s == SlotA || s == SlotB }

// ParseSlot accepts exactly "A" or "B".
func ParseSlot(s string) (Slot, error) {
	if sl := Slot(s); sl.Valid() {
		return sl, nil
	}
	return "", fmt.Errorf("slot %q: want %q or %q", s, SlotA, SlotB)
}

// SlotState is what the agent knows of a slot's image (journal, status "slots").
type SlotState string

// The slot states.
const (
	SlotUnknown SlotState = ""       // nothing known: never written by otad, or a write began
	SlotStaged  SlotState = "staged" // verified image, not yet committed
	SlotGood    SlotState = "good"   // committed (or the slot the device first booted)
	SlotBad     SlotState = "bad"    // rejected: failed health check, fell back, or marked bad
)
