//go:build !amd64 || purego

package sha256pair

var hasSHA = false

func blocks(h *[8]uint32, p []byte) { blocksGeneric(h, p) }

func block2(a, b *[8]uint32, pa, pb *byte, n int) { panic("sha256pair: no SHA extensions") }
