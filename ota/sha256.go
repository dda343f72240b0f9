package ota

import (
	"crypto/sha256"
	"encoding/hex"
)

// ParseSHA256 reads a SHA-256 as the contract writes it (manifests, indexes,
// status): 64 hex digits, in either case.
func ParseSHA256(s string) (sum [sha256.Size]byte, ok bool) {
	if len(s) != hex.EncodedLen(sha256.Size) {
		return sum, false
	}
	_, err := hex.Decode(sum[:], []byte(s))
	return sum, err == nil
}
