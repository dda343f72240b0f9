package payload

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// Delta index version 2 (docs/contract/chunked.md): a record names as many ranges of
// the older image as its dictionary needs, up to MaxRanges2 — the old bytes of each
// file the chunk holds, wherever the older image keeps them (file-aware deltas: a
// file's bytes lie in several extents, and a chunk may hold many small files). The
// record is a 16-byte head, then its ranges, 12 bytes each. The signer names at most
// MaxRanges ranges a record on average, so a version 2 index is never larger than a
// version 1 index of as many records: the manifest's bounds on index_size hold for
// both, and a device that knows only version 1 refuses it as a delta index and goes
// on without deltas.
const (
	MaxRanges2        = 32
	deltaRecordHead2  = 16
	deltaRangeSize2   = 12
	deltaMethodZstdRD = 0 // zstd frame, raw dictionary of its ranges
	deltaMethodDiff   = 1 // zstd frame of a binary diff against its ranges (deltadiff.go)
)

func (d *Delta) checkRecords2(recs []byte, x *Index, want DeltaExpect, at string) error {
	d.recs = make([]deltaRec, 0, want.Count)
	all := make([]Range, 0, min(int64(len(recs))/deltaRangeSize2, MaxRanges*want.Count))
	off, maxDict := want.IndexSize, MaxDict(x)
	le := binary.LittleEndian
	for k := range int(want.Count) {
		bad := func(field, format string, args ...any) error {
			return indexErr(fmt.Sprintf("%s.chunk[%d].%s", at, k, field), format, args...)
		}
		if len(recs) < deltaRecordHead2 {
			return bad("ranges", "the index ends inside the record")
		}
		b := recs[:deltaRecordHead2]
		c := DeltaChunk{
			Chunk:  int(min(le.Uint32(b[0:4]), 1<<31-1)),
			Length: int(le.Uint32(b[4:8])),
			N:      int(b[8]),
			Offset: off,
			Method: int(b[9]),
		}
		switch {
		case b[9] != deltaMethodZstdRD && b[9] != deltaMethodDiff:
			return bad("method", "%d: want %d (zstd, raw dictionary) or %d (binary diff)", b[9], deltaMethodZstdRD, deltaMethodDiff)
		case !bytes.Equal(b[10:16], make([]byte, 6)):
			return bad("reserved", "bytes 10-15 must be zeros")
		}
		if err := d.checkChunk(k, c, x, want, off, bad); err != nil {
			return err
		}
		switch {
		case c.N < 1 || c.N > MaxRanges2:
			return bad("ranges", "%d ranges: want 1 to %d", c.N, MaxRanges2)
		case len(recs) < deltaRecordHead2+deltaRangeSize2*c.N:
			return bad("ranges", "%d ranges, but the index ends before them", c.N)
		}
		var dict int64
		first := len(all)
		for j := range c.N {
			e := recs[deltaRecordHead2+deltaRangeSize2*j:]
			r := Range{Off: int64(min(le.Uint64(e), 1<<62)), Len: int64(le.Uint32(e[8:]))}
			if r.Len < 1 || r.Off > d.FromSize-r.Len {
				return bad(fmt.Sprintf("range[%d]", j), "%d+%d: want bytes inside the %d of the older image", r.Off, r.Len, d.FromSize)
			}
			all = append(all, r)
			dict += r.Len
		}
		switch {
		case c.Method == deltaMethodZstdRD && dict > maxDict:
			return bad("ranges", "a dictionary of %d bytes, more than %d", dict, maxDict)
		case c.Method == deltaMethodDiff && dict > MaxDiffSource:
			return bad("ranges", "a binary diff's source of %d bytes, more than %d", dict, MaxDiffSource)
		}
		d.keep(c, first)
		off += int64(c.Length)
		recs = recs[deltaRecordHead2+deltaRangeSize2*c.N:]
	}
	if len(recs) != 0 {
		return indexErr(at+".index", "%d bytes after the last record", len(recs))
	}
	d.setRanges(all)
	if off != want.Size {
		return indexErr(at+".size", "%d, but the index and its deltas make %d bytes", want.Size, off)
	}
	return nil
}

// appendDeltaRecord2 appends c's version 2 record to raw.
func appendDeltaRecord2(raw []byte, c DeltaChunk) []byte {
	var h [deltaRecordHead2]byte
	binary.LittleEndian.PutUint32(h[0:4], uint32(c.Chunk))
	binary.LittleEndian.PutUint32(h[4:8], uint32(c.Length))
	h[8] = byte(len(c.Ranges))
	h[9] = byte(c.Method)
	raw = append(raw, h[:]...)
	for _, r := range c.Ranges {
		raw = binary.LittleEndian.AppendUint64(raw, uint64(r.Off))
		raw = binary.LittleEndian.AppendUint32(raw, uint32(r.Len))
	}
	return raw
}
