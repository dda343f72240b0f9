package payload

import (
	"crypto/sha256"
	"hash"
	"io"
	"slices"
)

// PrefixSums reads a stream once and hashes its first n bytes for each n of a few
// sizes: the older images' sizes of a manifest's deltas entries, while a booted slot is
// scanned (ScanFor reads it through this), so that a slot holding one of them (a
// factory image no journal knows) is known by that image's sha256. One SHA-256 runs,
// up to the largest size only; a size past the stream's end gets no sum.
type PrefixSums struct {
	r     io.Reader
	h     hash.Hash
	pos   int64
	sizes []int64 // ascending, still ahead of pos
	sums  map[int64][sha256.Size]byte
}

// NewPrefixSums reads r, hashing the prefixes of the sizes given (those < 1 ignored).
func NewPrefixSums(r io.Reader, sizes []int64) *PrefixSums {
	s := slices.Sorted(slices.Values(sizes))
	s = slices.Compact(slices.DeleteFunc(s, func(n int64) bool { return n < 1 }))
	return &PrefixSums{r: r, h: sha256.New(), sizes: s, sums: map[int64][sha256.Size]byte{}}
}

func (p *PrefixSums) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.feed(b[:n])
	return n, err
}

func (p *PrefixSums) feed(b []byte) {
	for len(b) > 0 && len(p.sizes) > 0 {
		k := int(min(int64(len(b)), p.sizes[0]-p.pos))
		p.h.Write(b[:k])
		b, p.pos = b[k:], p.pos+int64(k)
		if p.pos == p.sizes[0] {
			p.sums[p.pos] = [sha256.Size]byte(p.h.Sum(nil))
			p.sizes = p.sizes[1:]
		}
	}
}

// Sums are the sha256 of each prefix read so far, by size.
func (p *PrefixSums) Sums() map[int64][sha256.Size]byte { return p.sums }
