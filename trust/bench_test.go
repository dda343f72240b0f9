package trust

import "testing"

// BenchmarkWalkMaxChain is what a device pays for the longest chain it
// walks at once: MaxChain rotations, each checked against the old and the
// new root keys (2 of 3 each).
func BenchmarkWalkMaxChain(b *testing.B) {
	rel := newKeys(b, 1)
	prevKeys := newKeys(b, 3)
	first := newRoot(b, 1, prevKeys, 2, rel, prevKeys[0], prevKeys[1])
	var chain []*Root
	for v := uint64(2); v <= MaxChain+1; v++ {
		ks := newKeys(b, 3)
		chain = append(chain, roundTrip(b, newRoot(b, v, ks, 2, rel, prevKeys[0], prevKeys[1], ks[0], ks[1])))
		prevKeys = ks
	}
	b.ResetTimer()
	for b.Loop() {
		if got, err := Walk(first, chain); err != nil || got.Version != MaxChain+1 {
			b.Fatalf("walked to %d: %v", got.Version, err)
		}
	}
}
