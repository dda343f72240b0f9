package payload

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/otad/otad/ota"
)

// TestParseIndex2Refuses: each hostile version 2 index or manifest value is refused
// with index_mismatch naming the field; the index is re-compressed after a mutation
// of its records, and the manifest's size and sha256 follow, so the check under test
// is the one that must catch it.
func TestParseIndex2Refuses(t *testing.T) {
	b := build(t, layout2Example(), Options{ChunkSize: 4096, Chunking: ota.ChunkingCDC})
	rec := func(i int) int { return HeaderSize2 + i*RecordSize2 }
	for _, tc := range []struct {
		name   string
		raw    func(r []byte, e *Expect) []byte // the decompressed index
		file   func(f []byte) []byte            // the file as fetched, after compression
		expect func(e *Expect)
		field  string
	}{
		{name: "count past what a device holds", expect: func(e *Expect) { e.ChunkCount = MaxIndexSize }, field: "payload.chunks.count"},
		{name: "count above the image size", expect: func(e *Expect) { e.ChunkCount = e.ImageSize + 1 }, field: "payload.chunks.count"},
		{name: "index_size past what its records compress to", expect: func(e *Expect) { e.IndexSize = 1 << 20 }, field: "payload.chunks.index_size"},
		{name: "unknown chunking", expect: func(e *Expect) { e.Chunking = "rabin" }, field: "payload.chunks.chunking"},
		{name: "not zstd", file: func(f []byte) []byte { f[0] ^= 1; return f }, field: "index"},
		{name: "decompresses short", raw: func(r []byte, e *Expect) []byte { return r[:len(r)-1] }, field: "index"},
		{name: "decompresses long", raw: func(r []byte, e *Expect) []byte { return append(r, 0) }, field: "index"},
		{name: "version", raw: func(r []byte, e *Expect) []byte { r[7] = 1; return r }, field: "index.header.version"},
		{name: "min size", raw: func(r []byte, e *Expect) []byte { binary.LittleEndian.PutUint32(r[32:], 512); return r }, field: "index.header.min_size"},
		{name: "polynomial", raw: func(r []byte, e *Expect) []byte { r[40] ^= 1; return r }, field: "index.header.polynomial"},
		{name: "reserved header bytes", raw: func(r []byte, e *Expect) []byte { r[60] = 1; return r }, field: "index.header.reserved"},
		{name: "record reserved bytes", raw: func(r []byte, e *Expect) []byte { r[rec(1)+46] = 1; return r }, field: "index.chunk[1].reserved"},
		{name: "zero run with a hash", raw: func(r []byte, e *Expect) []byte { r[rec(1)] = 1; return r }, field: "index.chunk[1].sha256"},
		{name: "zero run stored", raw: func(r []byte, e *Expect) []byte {
			binary.LittleEndian.PutUint32(r[rec(1)+40:], 5)
			e.StoreSize += 5
			return r
		}, field: "index.chunk[1].stored_length"},
		{name: "chunk past max_size", raw: func(r []byte, e *Expect) []byte {
			binary.LittleEndian.PutUint64(r[rec(0)+32:], 16385)
			binary.LittleEndian.PutUint32(r[rec(0)+40:], 16385)
			r[rec(0)+44] = byte(KindRaw)
			return r
		}, field: "index.chunk[0].stored_length"},
		{name: "lengths past the image", raw: func(r []byte, e *Expect) []byte {
			binary.LittleEndian.PutUint64(r[rec(1)+32:], 1<<40)
			return r
		}, field: "index.chunk[1].length"},
		{name: "length zero", raw: func(r []byte, e *Expect) []byte { binary.LittleEndian.PutUint64(r[rec(1)+32:], 0); return r }, field: "index.chunk[1].length"},
		{name: "raw chunk stored short", raw: func(r []byte, e *Expect) []byte {
			binary.LittleEndian.PutUint32(r[rec(2)+40:], 100)
			e.StoreSize -= 3070 - 100
			return r
		}, field: "index.chunk[2].stored_length"},
		{name: "unknown kind", raw: func(r []byte, e *Expect) []byte { r[rec(3)+44] = 7; return r }, field: "index.chunk[3].kind"},
		{name: "store_size larger than the chunks", expect: func(e *Expect) { e.StoreSize++ }, field: "payload.chunks.store_size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := b.res.Expect()
			file := b.res.Index
			if tc.raw != nil {
				raw, err := decompressExact(file, IndexSize2(want.ChunkCount))
				if err != nil {
					t.Fatal(err)
				}
				if file, err = compressIndex(tc.raw(raw, &want)); err != nil {
					t.Fatal(err)
				}
			}
			if tc.file != nil {
				file = tc.file(append([]byte(nil), file...))
			}
			want = expectFor(file, want)
			if tc.expect != nil {
				tc.expect(&want)
			}
			x, err := ParseIndex(file, want)
			if err == nil {
				t.Fatalf("accepted: %d chunks", x.Count())
			}
			var e *ota.Error
			if ota.CodeOf(err) != ota.CodeIndexMismatch || !asErr(err, &e) || e.Field != tc.field {
				t.Fatalf("want index_mismatch at %s, got %v", tc.field, err)
			}
		})
	}
}

// TestParseDeltaRefuses: a delta index for another older image, another index, or
// with records a device must not follow is refused, naming the field.
func TestParseDeltaRefuses(t *testing.T) {
	p := fuzzPair(t)
	recAt := func(k int) int { return DeltaHeaderSize + k*DeltaRecordSize }
	for _, tc := range []struct {
		name   string
		raw    func(r []byte)
		expect func(e *DeltaExpect)
		field  string
	}{
		{name: "keyed to another older image", expect: func(e *DeltaExpect) { e.From = expectFor([]byte("x"), Expect{}).IndexSHA256 }, field: "delta.index.header.from"},
		{name: "for another index", raw: func(r []byte) { r[40] ^= 1 }, field: "delta.index.header.index_sha256"},
		{name: "magic", raw: func(r []byte) { r[0] = 'X' }, field: "delta.index.header.magic"},
		{name: "the older image's size differs", raw: func(r []byte) { r[72]++ }, field: "delta.index.header.from_size"},
		{name: "the manifest's older image of another size", expect: func(e *DeltaExpect) { e.FromSize-- }, field: "delta.index.header.from_size"},
		{name: "the manifest's older image of no size", expect: func(e *DeltaExpect) { e.FromSize = 0 }, field: "delta.from_size"},
		{name: "size disagrees with deltas_size", expect: func(e *DeltaExpect) { e.Size++ }, field: "delta.index.header.deltas_size"},
		{name: "chunks out of order", raw: func(r []byte) {
			binary.LittleEndian.PutUint32(r[recAt(0):], 1<<20)
		}, field: "delta.chunk[0].chunk"},
		{name: "delta as long as the stored chunk", raw: func(r []byte) {
			binary.LittleEndian.PutUint32(r[recAt(0)+4:], 1<<24)
		}, field: "delta.chunk[0].length"},
		{name: "no ranges", raw: func(r []byte) { r[recAt(0)+8] = 0 }, field: "delta.chunk[0].ranges"},
		{name: "range past the older image", raw: func(r []byte) {
			binary.LittleEndian.PutUint64(r[recAt(0)+16:], 1<<40)
		}, field: "delta.chunk[0].range[0]"},
		{name: "dictionary larger than MaxDict", raw: func(r []byte) {
			binary.LittleEndian.PutUint64(r[recAt(0)+16:], 0)
			binary.LittleEndian.PutUint32(r[recAt(0)+24:], uint32(len(p.oldImg)))
		}, field: "delta.chunk[0].ranges"},
		{name: "unused range not zeros", raw: func(r []byte) { r[recAt(0)+16+12*3] = 1 }, field: "delta.chunk[0].range[3]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := p.res.Expect()
			file := p.res.Index
			if tc.raw != nil {
				raw, err := decompressExact(file, DeltaIndexSize(want.Count))
				if err != nil {
					t.Fatal(err)
				}
				tc.raw(raw)
				if file, err = compressIndex(raw); err != nil {
					t.Fatal(err)
				}
				// The frames stay where they are: the file's size follows the index's.
				want.Size += int64(len(file)) - want.IndexSize
				want.IndexSize, want.IndexSHA256 = int64(len(file)), expectFor(file, Expect{}).IndexSHA256
			}
			if tc.expect != nil {
				tc.expect(&want)
			}
			_, err := ParseDelta(file, want, p.x, "delta")
			var e *ota.Error
			if ota.CodeOf(err) != ota.CodeIndexMismatch || !asErr(err, &e) || e.Field != tc.field {
				t.Fatalf("want index_mismatch at %s, got %v", tc.field, err)
			}
		})
	}
}

func asErr(err error, e **ota.Error) bool { return errors.As(err, e) }
