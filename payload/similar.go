package payload

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"errors"
	"io"
	"slices"

	"github.com/restic/chunker"
)

// Pieces of a few KiB, cut by restic/chunker inside each chunk, find where an older
// image holds bytes like a chunk's even when no whole chunk matches: the delta's
// dictionary is taken from there.
const (
	pieceMin  = 1 << 10
	pieceMax  = 16 << 10
	pieceBits = 11
	// dictPad is how far a dictionary range reaches past the bytes a shift lines up,
	// for what moved a little further.
	dictPad = 8 << 10
)

// pieces cuts content-defined pieces of chunks and hashes them.
type pieces struct {
	ch  *chunker.Chunker
	rd  bytes.Reader
	buf []byte
}

func newPieces() *pieces {
	p := &pieces{buf: make([]byte, pieceMax)}
	p.ch = chunker.NewWithBoundaries(&p.rd, CDCPolynomial, pieceMin, pieceMax)
	return p
}

// each calls fn with the offset in b, length and hash key of each piece of b that is
// not all zeros.
func (p *pieces) each(b []byte, fn func(off, n int64, key uint64)) {
	p.rd.Reset(b)
	p.ch.ResetWithBoundaries(&p.rd, CDCPolynomial, pieceMin, pieceMax)
	p.ch.SetAverageBits(pieceBits)
	var off int64
	for {
		c, err := p.ch.Next(p.buf)
		if errors.Is(err, io.EOF) || err != nil {
			return
		}
		if !AllZero(c.Data) {
			fn(off, int64(len(c.Data)), haveKey(sha256.Sum256(c.Data)))
		}
		off += int64(len(c.Data))
	}
}

// similar finds, for a chunk at some offset of the new image, the shifts that line
// its pieces up with the older image, weighted by the bytes each lines up.
type similar struct {
	at map[uint64]int64 // piece key → offset in the older image
	p  *pieces
}

func newSimilar() *similar { return &similar{at: map[uint64]int64{}, p: newPieces()} }

// addOld records the pieces of b, the older image's bytes at off.
func (s *similar) addOld(b []byte, off int64) {
	s.p.each(b, func(o, _ int64, key uint64) {
		if _, ok := s.at[key]; !ok {
			s.at[key] = off + o
		}
	})
}

type shift struct {
	by     int64 // older offset minus newer offset
	weight int64
}

// shifts returns the shifts of the pieces of b (the new image's bytes at off) found in
// the older image, heaviest first.
func (s *similar) shifts(b []byte, off int64) []shift {
	w := map[int64]int64{}
	s.p.each(b, func(o, n int64, key uint64) {
		if at, ok := s.at[key]; ok {
			w[at-(off+o)] += n
		}
	})
	out := make([]shift, 0, len(w))
	for by, n := range w {
		out = append(out, shift{by, n})
	}
	slices.SortFunc(out, func(a, b shift) int {
		if c := cmp.Compare(b.weight, a.weight); c != 0 {
			return c
		}
		return cmp.Compare(a.by, b.by)
	})
	return out
}

// dictRanges turns shifts into at most MaxRanges ranges of the older image (size
// bytes) around a chunk at off of n bytes, of at most limit bytes in all, heaviest
// first; overlapping ranges are merged.
func dictRanges(shifts []shift, off, n, size, limit int64) []Range {
	var rs []Range
	var total int64
	for _, s := range shifts {
		lo, hi := max(0, off+s.by-dictPad), min(size, off+n+s.by+dictPad)
		if lo >= hi {
			continue
		}
		merged := false
		for i, r := range rs {
			if lo <= r.Off+r.Len && hi >= r.Off {
				nlo, nhi := min(lo, r.Off), max(hi, r.Off+r.Len)
				if total+(nhi-nlo)-r.Len <= limit {
					total += (nhi - nlo) - r.Len
					rs[i] = Range{nlo, nhi - nlo}
				}
				merged = true
				break
			}
		}
		if merged {
			continue
		}
		if len(rs) == MaxRanges {
			continue
		}
		if total+(hi-lo) > limit {
			hi = lo + limit - total
			if hi <= lo {
				continue
			}
		}
		rs = append(rs, Range{lo, hi - lo})
		total += hi - lo
	}
	return rs
}
