package payload

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/otad/otad/ota"
)

// The delta file of one older image (docs/contract/chunked.md): its index, one zstd
// frame that decompresses to a 96-byte header and one 64-byte record per chunk, then
// the chunks' deltas back to back in record order. Each delta is one zstd frame whose
// raw dictionary is up to MaxRanges ranges of the older image, read from the booted
// slot, one after another.
const (
	DeltaHeaderSize = 96
	// maxFromSize bounds an older image's size, so that offsets inside it never overflow.
	maxFromSize     = 1 << 62
	DeltaRecordSize = 64
	MaxRanges       = 4

	deltaMagic   = "OTADDLT"
	deltaVersion = 1
	// deltaVersion2 records name up to MaxRanges2 ranges each (deltaranges.go).
	deltaVersion2 = 2
)

// MaxDict is the largest dictionary a delta of x's chunks uses: two of its largest
// chunks, so that a device decodes one with a few chunks of memory.
func MaxDict(x *Index) int64 { return 2 * x.MaxChunk() }

// DeltaIndexSize is the uncompressed size of a delta index of count records, or -1.
func DeltaIndexSize(count int64) int64 {
	if count < 0 || count > (1<<63-1-DeltaHeaderSize)/DeltaRecordSize {
		return -1
	}
	return DeltaHeaderSize + count*DeltaRecordSize
}

// DeltaExpect is what a manifest's payload.chunks.deltas entry says of its file.
type DeltaExpect struct {
	From        string // sha256 of the older image, 64 hex digits
	FromSize    int64  // its size: a booted slot whose first FromSize bytes hash to From holds it
	IndexSize   int64
	IndexSHA256 string
	Count       int64
	Size        int64 // the whole file: the index, then the deltas
}

// DeltaExpectOf is what the manifest's entry d says of its file.
func DeltaExpectOf(d ota.Delta) DeltaExpect {
	return DeltaExpect{From: d.From, FromSize: d.FromSize, IndexSize: d.IndexSize, IndexSHA256: d.IndexSHA256, Count: d.Count, Size: d.Size}
}

// Range is bytes [Off, Off+Len) of the older image.
type Range struct{ Off, Len int64 }

// DeltaChunk is one record: chunk Chunk of the index is the zstd frame of Length
// bytes at Offset of the delta file, decoded with the ranges of the older image as its
// dictionary.
type DeltaChunk struct {
	Chunk  int
	Offset int64
	Length int
	Ranges []Range
	N      int // len(Ranges)
	// Method is how the frame makes the chunk: 0, a zstd frame whose raw
	// dictionary is the ranges; 1 (version 2 only), a zstd frame of a binary diff
	// against them (deltadiff.go).
	Method int
}

// DictLen is the size of c's dictionary.
func (c DeltaChunk) DictLen() int64 {
	var n int64
	for _, r := range c.Ranges[:c.N] {
		n += r.Len
	}
	return n
}

// Delta is a parsed, checked delta index for the chunks of one Index.
type Delta struct {
	From     [sha256.Size]byte
	FromSize int64
	Version  int // of the delta index: 1 or 2
	recs     []deltaRec
	ranges   []Range // every record's, in order
	size     int64
}

// deltaRec is a DeltaChunk as a Delta keeps it, its ranges in Delta.ranges: a
// device holds every record while it installs, and a DeltaChunk each is 64
// bytes and a slice of its own (a delta index of 8,633 records held 888 KB).
type deltaRec struct {
	offset int64
	chunk  int32
	length int32
	first  int32 // its ranges: ranges[first:first+n]
	n      uint8
	method uint8
}

// keep appends c, checked, whose ranges are all[first:]. Every field fits:
// the records decompress to at most MaxIndexSize bytes (Validate), so there
// are fewer than 2^31 ranges, and c's chunk and length are x's.
func (d *Delta) keep(c DeltaChunk, first int) {
	d.recs = append(d.recs, deltaRec{offset: c.Offset, chunk: int32(c.Chunk), length: int32(c.Length), first: int32(first), n: uint8(c.N), method: uint8(c.Method)})
}

// setRanges keeps all, the records' ranges, without the room left over.
func (d *Delta) setRanges(all []Range) {
	if cap(all)-len(all) > len(all)/8 {
		all = append([]Range(nil), all...)
	}
	d.ranges = all
}

// Count is the number of chunks the deltas rebuild.
func (d *Delta) Count() int { return len(d.recs) }

// At returns record k, in chunk order.
func (d *Delta) At(k int) DeltaChunk {
	r := d.recs[k]
	end := int(r.first) + int(r.n)
	return DeltaChunk{Chunk: int(r.chunk), Offset: r.offset, Length: int(r.length),
		Ranges: d.ranges[r.first:end:end], N: int(r.n), Method: int(r.method)}
}

// Find returns the delta of chunk i, if there is one.
func (d *Delta) Find(i int) (DeltaChunk, bool) {
	if d == nil {
		return DeltaChunk{}, false
	}
	lo, hi := 0, len(d.recs)
	for lo < hi {
		m := (lo + hi) / 2
		if int(d.recs[m].chunk) < i {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(d.recs) && int(d.recs[lo].chunk) == i {
		return d.At(lo), true
	}
	return DeltaChunk{}, false
}

// Size is the delta file's size: index and frames.
func (d *Delta) Size() int64 { return d.size }

// Validate refuses values of a deltas entry that contradict each other or the format,
// with an index_mismatch naming the field under at (payload.chunks.deltas[0]).
func (w DeltaExpect) Validate(at string) error {
	raw := DeltaIndexSize(w.Count)
	bad := func(field, format string, args ...any) error {
		return indexErr(at+"."+field, format, args...)
	}
	if _, ok := ota.ParseSHA256(w.From); !ok {
		return bad("from", "want 64 hex digits")
	}
	if _, ok := ota.ParseSHA256(w.IndexSHA256); !ok {
		return bad("index_sha256", "want 64 hex digits")
	}
	switch {
	case w.FromSize < 1 || w.FromSize > maxFromSize:
		return bad("from_size", "%d: want 1 to %d bytes", w.FromSize, int64(maxFromSize))
	case w.Count < 1 || raw < 0 || raw > MaxIndexSize:
		return bad("count", "%d: want 1 to %d records", w.Count, (MaxIndexSize-DeltaHeaderSize)/DeltaRecordSize)
	case w.IndexSize < 1 || w.IndexSize > maxCompressed(raw):
		return bad("index_size", "%d, but %d records compress to 1 to %d bytes", w.IndexSize, w.Count, maxCompressed(raw))
	case w.Size < w.IndexSize+w.Count || w.Size < 0:
		return bad("size", "%d, less than the index and a byte for each of %d deltas", w.Size, w.Count)
	}
	return nil
}

// ParseDelta checks data, a delta index as fetched (the first IndexSize bytes of the
// delta file), against the manifest's entry and x, the index it is for: its size and
// sha256, then the header (the older image it is keyed to and its size, the index it
// belongs to, the count and the frames' size), then every record: chunks in order, each in x and
// not a zero chunk, a delta shorter than the chunk as stored, 1 to MaxRanges ranges
// inside the older image making a dictionary of at most MaxDict(x) bytes. Refusals are
// index_mismatch naming the field under at.
func ParseDelta(data []byte, want DeltaExpect, x *Index, at string) (*Delta, error) {
	if err := want.Validate(at); err != nil {
		return nil, err
	}
	bad := func(field, format string, args ...any) error {
		return indexErr(at+"."+field, format, args...)
	}
	if int64(len(data)) != want.IndexSize {
		return nil, bad("index", "%d bytes, index_size says %d", len(data), want.IndexSize)
	}
	wantSum, _ := ota.ParseSHA256(want.IndexSHA256)
	if sum := sha256.Sum256(data); sum != wantSum {
		return nil, bad("index", "sha256 %x, index_sha256 says %s", sum, strings.ToLower(want.IndexSHA256))
	}
	// A version 2 index is never larger than version 1's of as many records.
	raw, err := decompressUpTo(data, DeltaIndexSize(want.Count))
	if err != nil {
		return nil, bad("index", "%v", err)
	}
	if len(raw) < DeltaHeaderSize {
		return nil, bad("index", "decompresses to %d bytes, less than a header", len(raw))
	}
	from, _ := ota.ParseSHA256(want.From)
	d := &Delta{From: from, FromSize: int64(binary.LittleEndian.Uint64(raw[72:80])), Version: int(raw[7]), size: want.Size}
	to := x.SHA256()
	switch {
	case string(raw[0:7]) != deltaMagic:
		return nil, bad("index.header.magic", "want %q, got %q", deltaMagic, raw[0:7])
	case raw[7] != deltaVersion && raw[7] != deltaVersion2:
		return nil, bad("index.header.version", "want %d or %d, got %d", deltaVersion, deltaVersion2, raw[7])
	case raw[7] == deltaVersion && int64(len(raw)) != DeltaIndexSize(want.Count):
		return nil, bad("index", "decompresses to %d bytes, want %d", len(raw), DeltaIndexSize(want.Count))
	case [32]byte(raw[8:40]) != from:
		return nil, bad("index.header.from", "%x, the manifest says %x", raw[8:40], from)
	case [32]byte(raw[40:72]) != to:
		return nil, bad("index.header.index_sha256", "%x: deltas for another index (this one's is %x)", raw[40:72], to)
	case d.FromSize != want.FromSize:
		return nil, bad("index.header.from_size", "%d, the manifest says %d", d.FromSize, want.FromSize)
	case binary.LittleEndian.Uint64(raw[80:88]) != uint64(want.Count):
		return nil, bad("index.header.count", "%d, the manifest says %d", binary.LittleEndian.Uint64(raw[80:88]), want.Count)
	case binary.LittleEndian.Uint64(raw[88:96]) != uint64(want.Size-want.IndexSize):
		return nil, bad("index.header.deltas_size", "%d, the manifest's sizes make %d", binary.LittleEndian.Uint64(raw[88:96]), want.Size-want.IndexSize)
	}
	check := d.checkRecords
	if d.Version == deltaVersion2 {
		check = d.checkRecords2
	}
	if err := check(raw[DeltaHeaderSize:], x, want, at); err != nil {
		return nil, err
	}
	return d, nil
}

// checkChunk holds what both record versions say of the k-th delta: a
// chunk of the index with bytes, after the last one, its delta smaller than
// the chunk as stored and within the file.
func (d *Delta) checkChunk(k int, c DeltaChunk, x *Index, want DeltaExpect, off int64, bad func(field, format string, args ...any) error) error {
	switch {
	case c.Chunk >= x.Count() || (k > 0 && c.Chunk <= int(d.recs[k-1].chunk)):
		return bad("chunk", "%d: want chunks of the index (%d), in order, once each", c.Chunk, x.Count())
	case x.Chunk(c.Chunk).Kind == KindZero:
		return bad("chunk", "%d is a zero chunk", c.Chunk)
	case c.Length < 1 || c.Length >= x.Chunk(c.Chunk).StoreLength:
		return bad("length", "%d: want 1 to less than the chunk's %d stored bytes", c.Length, x.Chunk(c.Chunk).StoreLength)
	case int64(c.Length) > want.Size-off:
		return bad("length", "delta bytes %d+%d run past the file's %d", off, c.Length, want.Size)
	}
	return nil
}

func (d *Delta) checkRecords(recs []byte, x *Index, want DeltaExpect, at string) error {
	d.recs = make([]deltaRec, 0, want.Count)
	all := make([]Range, 0, MaxRanges*want.Count)
	off, maxDict := want.IndexSize, MaxDict(x)
	for k := range int(want.Count) {
		b := recs[k*DeltaRecordSize : (k+1)*DeltaRecordSize]
		bad := func(field, format string, args ...any) error {
			return indexErr(fmt.Sprintf("%s.chunk[%d].%s", at, k, field), format, args...)
		}
		c := DeltaChunk{
			Chunk:  int(min(binary.LittleEndian.Uint32(b[0:4]), 1<<31-1)),
			Length: int(binary.LittleEndian.Uint32(b[4:8])),
			N:      int(b[8]),
			Offset: off,
		}
		switch {
		case !bytes.Equal(b[9:16], make([]byte, 7)):
			return bad("reserved", "bytes 9-15 must be zeros")
		}
		if err := d.checkChunk(k, c, x, want, off, bad); err != nil {
			return err
		}
		switch {
		case c.N < 1 || c.N > MaxRanges:
			return bad("ranges", "%d ranges: want 1 to %d", c.N, MaxRanges)
		}
		var dict int64
		first := len(all)
		for j := range MaxRanges {
			e := b[16+12*j : 28+12*j]
			r := Range{Off: int64(min(binary.LittleEndian.Uint64(e), 1<<62)), Len: int64(binary.LittleEndian.Uint32(e[8:]))}
			if j >= c.N {
				if r != (Range{}) {
					return bad(fmt.Sprintf("range[%d]", j), "unused range not zeros")
				}
				continue
			}
			if r.Len < 1 || r.Off > d.FromSize-r.Len {
				return bad(fmt.Sprintf("range[%d]", j), "%d+%d: want bytes inside the %d of the older image", r.Off, r.Len, d.FromSize)
			}
			all = append(all, r)
			dict += r.Len
		}
		if dict > maxDict {
			return bad("ranges", "a dictionary of %d bytes, more than %d", dict, maxDict)
		}
		d.keep(c, first)
		off += int64(c.Length)
	}
	d.setRanges(all)
	if off != want.Size {
		return indexErr(at+".size", "%d, but the index and its deltas make %d bytes", want.Size, off)
	}
	return nil
}

// putDeltaRecord writes c's record into b.
func putDeltaRecord(b []byte, c DeltaChunk) {
	clear(b[:DeltaRecordSize])
	binary.LittleEndian.PutUint32(b[0:4], uint32(c.Chunk))
	binary.LittleEndian.PutUint32(b[4:8], uint32(c.Length))
	b[8] = byte(c.N)
	for j, r := range c.Ranges[:c.N] {
		binary.LittleEndian.PutUint64(b[16+12*j:], uint64(r.Off))
		binary.LittleEndian.PutUint32(b[24+12*j:], uint32(r.Len))
	}
}

func putDeltaHeader(b []byte, from, to [sha256.Size]byte, fromSize, count, deltas int64) {
	copy(b[0:7], deltaMagic)
	b[7] = deltaVersion
	copy(b[8:40], from[:])
	copy(b[40:72], to[:])
	binary.LittleEndian.PutUint64(b[72:80], uint64(fromSize))
	binary.LittleEndian.PutUint64(b[80:88], uint64(count))
	binary.LittleEndian.PutUint64(b[88:96], uint64(deltas))
}
