package payload

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
)

// Binary diffs (delta method 1, docs/contract/chunked.md): bsdiff's idea, a chunk
// made of the older image's bytes plus small differences, for executables and
// libraries, where a rebuild shifts addresses all through the code and a zstd
// dictionary of a few chunks finds only short matches. The source is the
// record's ranges one after another, read from the booted slot where each piece
// is needed, never held whole: a device's memory is the chunk and its patch,
// however large the old file.
//
// A patch, as its zstd frame decompresses, is three uvarints (the lengths of the
// control, diff and extra sections) and the sections. The control section is
// triples of varints: add (bytes of the source from the source position, each
// plus the next diff byte), copy (the next extra bytes as they are) and seek (how
// far the source position moves after the add). The chunk is what the triples make,
// exactly its length.
const (
	// diffGram is the length of the matches the signer's index of a source finds.
	diffGram = 8
	// diffChain bounds the candidates tried at each position of a chunk.
	diffChain = 48
	// MaxDiffSource bounds the source of one binary diff at signing: a file larger
	// than this gets zstd deltas only.
	MaxDiffSource = 64 << 20
	// diffMinMatch is how much longer than what the current alignment gives a
	// match must be to start a new control triple (bsdiff's 8).
	diffMinMatch = 8
)

// maxPatch bounds the decompressed patch of a chunk of at most maxChunk bytes: the
// chunk's bytes once (diff and extra) and as much again of control; the signer
// makes no larger patch.
func maxPatch(maxChunk int64) int64 { return 2*maxChunk + 64 }

// patchWindow is the window a patch's frame is decoded with.
func patchWindow(maxChunk int64) int { return 1 << bits.Len64(uint64(maxPatch(maxChunk))) }

var errPatch = errors.New("corrupt binary diff")

// applyPatch rebuilds a chunk of n bytes into out (cap at least n) from patch and
// src, the source: out is returned, or errPatch wrapped, or src's error.
func applyPatch(out, patch []byte, n int, src io.ReaderAt, srcLen int64) ([]byte, error) {
	var lens [3]uint64
	for k := range lens {
		v, w := binary.Uvarint(patch)
		if w <= 0 || v > uint64(len(patch)) {
			return nil, fmt.Errorf("%w: section lengths", errPatch)
		}
		lens[k], patch = v, patch[w:]
	}
	if lens[0]+lens[1]+lens[2] != uint64(len(patch)) {
		return nil, fmt.Errorf("%w: sections of %d, %d and %d bytes in %d", errPatch, lens[0], lens[1], lens[2], len(patch))
	}
	ctrl, diff, extra := patch[:lens[0]], patch[lens[0]:lens[0]+lens[1]], patch[lens[0]+lens[1]:]
	if cap(out) < n {
		out = make([]byte, 0, n)
	}
	out = out[:0]
	var pos int64
	for len(ctrl) > 0 {
		add, w1 := binary.Uvarint(ctrl)
		if w1 <= 0 {
			return nil, fmt.Errorf("%w: control", errPatch)
		}
		cp, w2 := binary.Uvarint(ctrl[w1:])
		if w2 <= 0 {
			return nil, fmt.Errorf("%w: control", errPatch)
		}
		seek, w3 := binary.Varint(ctrl[w1+w2:])
		if w3 <= 0 {
			return nil, fmt.Errorf("%w: control", errPatch)
		}
		ctrl = ctrl[w1+w2+w3:]
		switch {
		case add > uint64(len(diff)) || add > uint64(n-len(out)):
			return nil, fmt.Errorf("%w: adds past the chunk or the diff bytes", errPatch)
		case pos < 0 || int64(add) > srcLen-pos:
			return nil, fmt.Errorf("%w: adds source bytes %d+%d of %d", errPatch, pos, add, srcLen)
		}
		k := len(out)
		out = out[:k+int(add)]
		if _, err := src.ReadAt(out[k:], pos); err != nil && add > 0 {
			return nil, err
		}
		for i, d := range diff[:add] {
			out[k+i] += d
		}
		diff = diff[add:]
		if cp > uint64(len(extra)) || cp > uint64(n-len(out)) {
			return nil, fmt.Errorf("%w: copies past the chunk or the extra bytes", errPatch)
		}
		out = append(out, extra[:cp]...)
		extra = extra[cp:]
		if seek < -srcLen || seek > srcLen {
			return nil, fmt.Errorf("%w: seeks %d in a source of %d", errPatch, seek, srcLen)
		}
		pos += int64(add) + seek
	}
	if len(out) != n || len(diff) != 0 || len(extra) != 0 {
		return nil, fmt.Errorf("%w: makes %d bytes of %d, %d diff and %d extra bytes unused", errPatch, len(out), n, len(diff), len(extra))
	}
	return out, nil
}

// rangesReader reads the ranges of an image one after another as one source.
type rangesReader struct {
	r  io.ReaderAt
	rs []Range
}

func (s rangesReader) ReadAt(b []byte, off int64) (int, error) {
	n := 0
	for _, r := range s.rs {
		if len(b) == 0 {
			break
		}
		if off >= r.Len {
			off -= r.Len
			continue
		}
		k := int(min(int64(len(b)), r.Len-off))
		if _, err := s.r.ReadAt(b[:k], r.Off+off); err != nil {
			return n, err
		}
		b, n, off = b[k:], n+k, 0
	}
	if len(b) > 0 {
		return n, io.EOF
	}
	return n, nil
}
