//go:build amd64 && !purego

package sha256pair

//go:generate sh -c "go run gen.go > block_amd64.s"

// hasSHA: the CPU has the SHA extensions (CPUID leaf 7, EBX bit 29) and
// SSSE3 and SSE4.1 (leaf 1, ECX bits 9 and 19), which the rounds use.
var hasSHA = func() bool {
	_, _, c1, _ := cpuid(1, 0)
	_, b7, _, _ := cpuid(7, 0)
	return c1&(1<<9) != 0 && c1&(1<<19) != 0 && b7&(1<<29) != 0
}()

func cpuid(leaf, sub uint32) (a, b, c, d uint32)

//go:noescape
func block1(dig *[8]uint32, p *byte, n int)

//go:noescape
func block2(a, b *[8]uint32, pa, pb *byte, n int)

// blocks hashes p, whole blocks, into h.
func blocks(h *[8]uint32, p []byte) {
	if hasSHA {
		block1(h, &p[0], len(p)/blockSize)
		return
	}
	blocksGeneric(h, p)
}
