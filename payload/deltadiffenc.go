package payload

import (
	"encoding/binary"
	"fmt"
	"math/bits"

	"github.com/klauspost/compress/zstd"
)

// diffSource is a binary diff's source at signing, with an index of where each
// diffGram bytes occur: hash chains, the latest first.
type diffSource struct {
	b    []byte
	bits int // of the hash: about two heads a position
	head []int32
	prev []int32
}

func (s *diffSource) hash(b []byte) uint32 {
	return uint32((binary.LittleEndian.Uint64(b) * 0x9E3779B97F4A7C15) >> (64 - s.bits))
}

func newDiffSource(b []byte) *diffSource {
	s := &diffSource{b: b, bits: min(max(bits.Len(uint(len(b)))+1, 10), 24), prev: make([]int32, len(b))}
	s.head = make([]int32, 1<<s.bits)
	for i := range s.head {
		s.head[i] = -1
	}
	for i := 0; i+diffGram <= len(b); i++ {
		h := s.hash(b[i:])
		s.prev[i], s.head[h] = s.head[h], int32(i)
	}
	return s
}

// match is the longest match of b's start in the source among the candidates
// the index and hint (where the current alignment points) give: its length and
// position.
func (s *diffSource) match(b []byte, hint int) (n, at int) {
	if hint >= 0 && hint < len(s.b) {
		n, at = commonPrefix(s.b[hint:], b), hint
	}
	if len(b) < diffGram {
		return n, at
	}
	for c, k := s.head[s.hash(b)], 0; c >= 0 && k < diffChain; c, k = s.prev[c], k+1 {
		if m := commonPrefix(s.b[c:], b); m > n {
			n, at = m, int(c)
			if m == len(b) {
				break
			}
		}
	}
	return n, at
}

func commonPrefix(a, b []byte) int {
	n := min(len(a), len(b))
	i := 0
	for i+8 <= n && binary.LittleEndian.Uint64(a[i:]) == binary.LittleEndian.Uint64(b[i:]) {
		i += 8
	}
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}

// patch is the binary diff that makes nb from the source (bsdiff's search: exact
// matches extended forward and back over bytes that mostly match), uncompressed.
func (s *diffSource) patch(nb []byte) []byte {
	var ctrl, diff, extra []byte
	old := s.b
	scan, ln, pos, lastscan, lastpos, lastoffset := 0, 0, 0, 0, 0, 0
	for scan < len(nb) {
		oldscore := 0
		scan += ln
		for scsc := scan; scan < len(nb); scan++ {
			ln, pos = s.match(nb[scan:], scan+lastoffset)
			for ; scsc < scan+ln; scsc++ {
				if o := scsc + lastoffset; o >= 0 && o < len(old) && old[o] == nb[scsc] {
					oldscore++
				}
			}
			if (ln == oldscore && ln != 0) || ln > oldscore+diffMinMatch {
				break
			}
			if o := scan + lastoffset; o >= 0 && o < len(old) && old[o] == nb[scan] {
				oldscore--
			}
		}
		if ln == oldscore && scan != len(nb) {
			continue
		}
		lenf := forwardLen(old[lastpos:], nb[lastscan:scan])
		lenb := 0
		if scan < len(nb) {
			lenb = backLen(old[:pos], nb[lastscan:scan])
		}
		if over := lastscan + lenf - (scan - lenb); over > 0 {
			s, best, lens := 0, 0, 0
			for i := range over {
				if nb[lastscan+lenf-over+i] == old[lastpos+lenf-over+i] {
					s++
				}
				if nb[scan-lenb+i] == old[pos-lenb+i] {
					s--
				}
				if s > best {
					best, lens = s, i+1
				}
			}
			lenf += lens - over
			lenb -= lens
		}
		for i := range lenf {
			diff = append(diff, nb[lastscan+i]-old[lastpos+i])
		}
		extra = append(extra, nb[lastscan+lenf:scan-lenb]...)
		ctrl = binary.AppendUvarint(ctrl, uint64(lenf))
		ctrl = binary.AppendUvarint(ctrl, uint64(scan-lenb-(lastscan+lenf)))
		ctrl = binary.AppendVarint(ctrl, int64(pos-lenb-(lastpos+lenf)))
		lastscan, lastpos, lastoffset = scan-lenb, pos-lenb, pos-scan
	}
	out := binary.AppendUvarint(nil, uint64(len(ctrl)))
	out = binary.AppendUvarint(out, uint64(len(diff)))
	out = binary.AppendUvarint(out, uint64(len(extra)))
	out = append(out, ctrl...)
	out = append(out, diff...)
	return append(out, extra...)
}

// forwardLen is how far from the start old and nb are best extended as one
// approximate match: where matching bytes most outnumber the others.
func forwardLen(old, nb []byte) int {
	s, best, n := 0, 0, 0
	for i := 0; i < len(nb) && i < len(old); {
		if old[i] == nb[i] {
			s++
		}
		i++
		if s*2-i > best*2-n {
			best, n = s, i
		}
	}
	return n
}

// backLen is forwardLen backwards from the ends of old and nb.
func backLen(old, nb []byte) int {
	s, best, n := 0, 0, 0
	for i := 1; i <= len(nb) && i <= len(old); i++ {
		if old[len(old)-i] == nb[len(nb)-i] {
			s++
		}
		if s*2-i > best*2-n {
			best, n = s, i
		}
	}
	return n
}

// tryFiles tries, for chunk i (b, at c) of a file-aware delta, a zstd delta
// against the old bytes of its files, a binary diff against the old bytes of
// the file holding most of it, and one against rs, the ranges its pieces or
// neighbours point to: the smallest is kept (at most maxN ranges).
func (e *deltaEncoder) tryFiles(o deltaOpts, b []byte, i int, c Chunk, rs []Range, maxDict int64, maxN int) error {
	if err := e.try(b, fileRanges(o, c.Offset, int64(c.Length), maxDict, maxN), HowFile); err != nil {
		return err
	}
	if key, src := fileSource(o, c.Offset, int64(c.Length), maxN); src != nil {
		if err := e.tryDiff(b, key, src, HowDiff); err != nil {
			return err
		}
	}
	// Metadata and the like: small changes at the same place.
	return e.tryDiff(b, -1-i, rs, HowDiffShift)
}

// tryDiff makes the binary diff of b against the ranges src of the older image,
// kept when smaller than the best so far. The source of a file (key 0 or more
// tells one from another) is read and indexed once for all its chunks; any other
// (key < 0) each time.
func (e *deltaEncoder) tryDiff(b []byte, key int, src []Range, how DeltaHow) error {
	if len(src) == 0 {
		return nil
	}
	s := e.src
	if key < 0 || s == nil || e.srcKey != key {
		var n int64
		for _, r := range src {
			n += r.Len
		}
		buf := make([]byte, n)
		if _, err := (rangesReader{r: e.old, rs: src}).ReadAt(buf, 0); err != nil {
			return fmt.Errorf("build delta: read the older image: %w", err)
		}
		s = newDiffSource(buf)
		if key >= 0 {
			e.src, e.srcKey = s, key
		}
	}
	enc, err := e.patchEncoder()
	if err != nil {
		return err
	}
	p := s.patch(b)
	if int64(len(p)) > e.patchMax {
		return nil
	}
	k := 1 - e.cur
	e.out[k] = enc.EncodeAll(p, e.out[k][:0])
	e.consider(k, src, how, len(b))
	return nil
}

// patchEncoder is the zstd encoder of patches: no dictionary, the best level.
func (e *deltaEncoder) patchEncoder() (*zstd.Encoder, error) {
	if e.penc == nil {
		enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedBestCompression),
			zstd.WithEncoderConcurrency(1), zstd.WithEncoderCRC(false),
			// No more than a device's decoder takes (DeltaDecoder.diff).
			zstd.WithWindowSize(max(1<<bits.Len64(uint64(e.patchMax)), zstd.MinWindowSize)))
		if err != nil {
			return nil, fmt.Errorf("build delta: zstd encoder: %w", err)
		}
		e.penc = enc
	}
	return e.penc, nil
}

func (e *deltaEncoder) close() {
	if e.enc != nil {
		e.enc.Close()
	}
	if e.penc != nil {
		e.penc.Close()
	}
}
