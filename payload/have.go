package payload

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
)

// Have lists the chunks a slot holds: for each chunk hash, where the first chunk with
// that hash lies in the slot. It keeps 16 bytes a chunk, the hash's first 8 bytes and
// the offset, so that the list of a 1 GiB slot in 64 KiB chunks takes 256 KiB of a
// device's memory. 8 bytes of a SHA-256 tell chunks apart in practice, and whoever takes
// a chunk on the strength of the list checks its whole hash before using it.
type Have struct {
	entries []haveEntry
	sorted  bool
}

type haveEntry struct {
	key uint64
	off int64
}

func haveKey(sum [sha256.Size]byte) uint64 { return binary.LittleEndian.Uint64(sum[:8]) }

// Add records a chunk with hash sum at offset off. Of several with one hash, Find
// returns the first added.
func (h *Have) Add(sum [sha256.Size]byte, off int64) {
	h.entries = append(h.entries, haveEntry{haveKey(sum), off})
	h.sorted = false
}

// Find returns where the slot holds a chunk with hash sum.
func (h *Have) Find(sum [sha256.Size]byte) (int64, bool) {
	if h == nil {
		return 0, false
	}
	if !h.sorted {
		// Stable: the first added stays first among equal keys, and only it is kept.
		slices.SortStableFunc(h.entries, func(a, b haveEntry) int { return cmp.Compare(a.key, b.key) })
		h.entries = slices.CompactFunc(h.entries, func(a, b haveEntry) bool { return a.key == b.key })
		h.sorted = true
	}
	k := haveKey(sum)
	i, ok := slices.BinarySearchFunc(h.entries, k, func(e haveEntry, k uint64) int { return cmp.Compare(e.key, k) })
	if !ok {
		return 0, false
	}
	return h.entries[i].off, true
}

// Len is how many chunks were added.
func (h *Have) Len() int {
	if h == nil {
		return 0
	}
	return len(h.entries)
}

// MarshalBinary is the list as 16 bytes a chunk, for a device to keep.
func (h *Have) MarshalBinary() ([]byte, error) {
	b := make([]byte, 0, 16*len(h.entries))
	for _, e := range h.entries {
		b = binary.LittleEndian.AppendUint64(b, e.key)
		b = binary.LittleEndian.AppendUint64(b, uint64(e.off))
	}
	return b, nil
}

// UnmarshalBinary reads what MarshalBinary wrote.
func (h *Have) UnmarshalBinary(b []byte) error {
	if len(b)%16 != 0 {
		return fmt.Errorf("chunk list: %d bytes, not a multiple of 16", len(b))
	}
	h.entries, h.sorted = make([]haveEntry, 0, len(b)/16), false
	for ; len(b) > 0; b = b[16:] {
		h.entries = append(h.entries, haveEntry{binary.LittleEndian.Uint64(b), int64(binary.LittleEndian.Uint64(b[8:]))})
	}
	return nil
}
