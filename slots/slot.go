// Package slots is the A/B slot model: slot names, booted-slot detection
// from the kernel command line, and the streaming slot writer that downloads,
// decompresses, hashes and writes an image into the inactive slot.
package slots

// Slot names (SPEC §1).
const (
	A = "A"
	B = "B"
)

// Other returns the other slot: A for B and B for A. Any other input gives "".
func Other(slot string) string {
	switch slot {
	case A:
		return B
	case B:
		return A
	}
	return ""
}

// Valid reports whether slot is one of the two slot names.
func Valid(slot string) bool { return slot == A || slot == B }
