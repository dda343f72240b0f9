package payload

import (
	"crypto/sha256"
	"encoding/binary"
	"math"
	"testing"

	"github.com/otad/otad/ota"
)

// sampleIndex is four 4 KiB chunks, the last one 100 bytes: zstd, raw, zero, raw.
func sampleIndex() ([]byte, Expect) {
	const cs = 4096
	return makeIndex(cs, 3*cs+100, ota.CompressionZstd, []record{
		{sum: [32]byte{1}, length: 100, kind: KindZstd},
		{sum: [32]byte{2}, length: cs, kind: KindRaw},
		{sum: zeroSum(cs), kind: KindZero},
		{sum: [32]byte{4}, length: 100, kind: KindRaw},
	})
}

func TestParseIndexAccepts(t *testing.T) {
	data, want := sampleIndex()
	x, err := ParseIndex(data, want)
	if err != nil {
		t.Fatal(err)
	}
	if x.Count() != 4 || x.ChunkSize() != 4096 || x.ImageSize() != 3*4096+100 || x.StoreSize() != 4296 || x.Compression() != ota.CompressionZstd {
		t.Fatalf("parsed %d chunks of %d, image %d, store %d, %s", x.Count(), x.ChunkSize(), x.ImageSize(), x.StoreSize(), x.Compression())
	}
	for i, w := range []Chunk{
		{Num: 0, SHA256: [32]byte{1}, Kind: KindZstd, Offset: 0, Length: 4096, StoreOffset: 0, StoreLength: 100},
		{Num: 1, SHA256: [32]byte{2}, Kind: KindRaw, Offset: 4096, Length: 4096, StoreOffset: 100, StoreLength: 4096},
		{Num: 2, SHA256: zeroSum(4096), Kind: KindZero, Offset: 8192, Length: 4096, StoreOffset: 4196, StoreLength: 0},
		{Num: 3, SHA256: [32]byte{4}, Kind: KindRaw, Offset: 12288, Length: 100, StoreOffset: 4196, StoreLength: 100},
	} {
		if got := x.Chunk(i); got != w {
			t.Errorf("chunk %d: %+v, want %+v", i, got, w)
		}
	}
}

// TestParseIndexRefuses: each hostile or inconsistent index or manifest value is
// refused with index_mismatch naming the field and chunk. Mutations of the index bytes
// fix up its size and sha256 in the manifest (unless the case is about those), so the
// check under test is the one that must catch it.
func TestParseIndexRefuses(t *testing.T) {
	const cs = 4096
	rec := func(i int) int { return HeaderSize + i*RecordSize }
	putLen := func(b []byte, i int, n uint32) {
		b[rec(i)+32], b[rec(i)+33], b[rec(i)+34] = byte(n), byte(n>>8), byte(n>>16)
	}
	for _, tc := range []struct {
		name   string
		mutate func(b []byte, e *Expect) []byte
		keep   bool // do not re-hash: the manifest's index_size and sha256 stay
		want   []string
	}{
		// The manifest's own values.
		{"chunk size not a power of two", func(b []byte, e *Expect) []byte { e.ChunkSize = 5000; return b }, false, []string{"payload.chunks.size", "5000"}},
		{"chunk size below 4 KiB", func(b []byte, e *Expect) []byte { e.ChunkSize = 2048; return b }, false, []string{"payload.chunks.size"}},
		{"chunk size above 4 MiB", func(b []byte, e *Expect) []byte { e.ChunkSize = 8 << 20; return b }, false, []string{"payload.chunks.size"}},
		{"image size zero", func(b []byte, e *Expect) []byte { e.ImageSize = 0; return b }, false, []string{"payload.size", "not positive"}},
		{"image size max int64", func(b []byte, e *Expect) []byte { e.ImageSize = math.MaxInt64; return b }, false, []string{"payload.chunks.count"}},
		{"count does not fit the size", func(b []byte, e *Expect) []byte { e.ChunkCount = 5; return b }, false, []string{"payload.chunks.count", "makes 4"}},
		{"8 EiB image: refused by its index size, nothing allocated", func(b []byte, e *Expect) []byte {
			e.ChunkSize, e.ImageSize, e.ChunkCount = MinChunkSize, math.MaxInt64, ChunkCount(math.MaxInt64, MinChunkSize)
			e.IndexSize = IndexSize(e.ChunkCount)
			return b
		}, true, []string{"index: 176 bytes", "says 81064793292668960"}},
		{"count whose index size overflows", func(b []byte, e *Expect) []byte {
			e.ChunkCount = math.MaxInt64
			e.IndexSize = HeaderSize + e.ChunkCount*RecordSize // wraps
			return b
		}, true, []string{"payload.chunks.count", "9223372036854775807"}},
		{"index size disagrees with count", func(b []byte, e *Expect) []byte { e.IndexSize--; return b }, true, []string{"payload.chunks.index_size"}},
		{"negative store size", func(b []byte, e *Expect) []byte { e.StoreSize = -1; return b }, false, []string{"payload.chunks.store_size", "negative"}},
		{"unknown compression", func(b []byte, e *Expect) []byte { e.Compression = "gzip"; return b }, false, []string{"payload.chunks.compression", "gzip"}},
		{"index sha256 not hex", func(b []byte, e *Expect) []byte { e.IndexSHA256 = "zz"; return b }, true, []string{"payload.chunks.index_sha256"}},

		// The downloaded bytes against index_size and index_sha256.
		{"index one byte short", func(b []byte, e *Expect) []byte { return b[:len(b)-1] }, true, []string{"index: 175 bytes", "index_size says 176"}},
		{"index one byte long", func(b []byte, e *Expect) []byte { return append(b, 0) }, true, []string{"index: 177 bytes"}},
		{"index altered", func(b []byte, e *Expect) []byte { b[rec(1)] ^= 1; return b }, true, []string{"index: sha256", "index_sha256 says"}},

		// The header.
		{"magic", func(b []byte, e *Expect) []byte { b[0] = 'X'; return b }, false, []string{"index.header.magic"}},
		{"version", func(b []byte, e *Expect) []byte { b[7] = 2; return b }, false, []string{"index.header.version", "got 2"}},
		{"header chunk size", func(b []byte, e *Expect) []byte { binary.LittleEndian.PutUint32(b[8:], 8192); return b }, false, []string{"index.header.chunk_size", "8192"}},
		{"header compression", func(b []byte, e *Expect) []byte { b[12] = compNone; return b }, false, []string{"index.header.compression"}},
		{"header compression unknown code", func(b []byte, e *Expect) []byte { b[12] = 9; return b }, false, []string{"index.header.compression", "code 9"}},
		{"reserved bytes", func(b []byte, e *Expect) []byte { b[14] = 1; return b }, false, []string{"index.header.reserved"}},
		{"header count huge", func(b []byte, e *Expect) []byte { binary.LittleEndian.PutUint64(b[16:], math.MaxUint64); return b }, false, []string{"index.header.chunk_count", "18446744073709551615"}},
		{"header image size", func(b []byte, e *Expect) []byte { binary.LittleEndian.PutUint64(b[24:], 3*cs+101); return b }, false, []string{"index.header.image_size"}},

		// The records.
		{"unknown kind", func(b []byte, e *Expect) []byte { b[rec(1)+35] = 3; return b }, false, []string{"index.chunk[1].kind", "unknown kind 3"}},
		{"zero chunk with a length", func(b []byte, e *Expect) []byte { putLen(b, 2, 10); e.StoreSize += 10; return b }, false, []string{"index.chunk[2].length", "zero chunk"}},
		{"zero chunk hash not of zeros", func(b []byte, e *Expect) []byte { b[rec(2)] ^= 1; return b }, false, []string{"index.chunk[2].sha256"}},
		{"last zero chunk hashed as a full chunk", func(b []byte, e *Expect) []byte {
			s := zeroSum(cs)
			copy(b[rec(3):], s[:])
			b[rec(3)+35] = byte(KindZero)
			putLen(b, 3, 0)
			e.StoreSize -= 100
			return b
		}, false, []string{"index.chunk[3]", "100 zero bytes"}},
		{"raw chunk shorter than its size", func(b []byte, e *Expect) []byte { putLen(b, 1, cs-1); e.StoreSize--; return b }, false, []string{"index.chunk[1]", "raw chunk", "4095"}},
		{"raw last chunk the full chunk size", func(b []byte, e *Expect) []byte { putLen(b, 3, cs); e.StoreSize += cs - 100; return b }, false, []string{"index.chunk[3]", "want its size 100"}},
		{"zstd chunk of length 0", func(b []byte, e *Expect) []byte { putLen(b, 0, 0); e.StoreSize -= 100; return b }, false, []string{"index.chunk[0]", "zstd chunk with stored length 0"}},
		{"zstd chunk as long as the chunk", func(b []byte, e *Expect) []byte { putLen(b, 0, cs); e.StoreSize += cs - 100; return b }, false, []string{"index.chunk[0]", "want 1 to 4095"}},
		{"zstd chunk of the largest length", func(b []byte, e *Expect) []byte { putLen(b, 0, maxStoredLen); return b }, false, []string{"index.chunk[0]", "16777215"}},
		{"zstd chunk in an uncompressed store", func(b []byte, e *Expect) []byte { b[12] = compNone; e.Compression = ota.CompressionNone; return b }, false, []string{"index.chunk[0].kind", "compression none"}},
		{"stored bytes past store_size", func(b []byte, e *Expect) []byte { e.StoreSize = 4100; return b }, false, []string{"index.chunk[1]", "run past store_size 4100"}},
		{"store_size larger than the chunks", func(b []byte, e *Expect) []byte { e.StoreSize++; return b }, false, []string{"payload.chunks.store_size", "4297, but the chunks store 4296"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, want := sampleIndex()
			data = tc.mutate(data, &want)
			if !tc.keep {
				want = expectFor(data, want)
			}
			x, err := ParseIndex(data, want)
			if err == nil {
				t.Fatalf("accepted: %d chunks", x.Count())
			}
			wantErr(t, err, ota.CodeIndexMismatch, tc.want...)
		})
	}
}

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

func TestIndexSizeAndChunkCount(t *testing.T) {
	for _, tc := range []struct{ size, chunk, count int64 }{
		{1, 4096, 1}, {4096, 4096, 1}, {4097, 4096, 2}, {math.MaxInt64, 4 << 20, math.MaxInt64/(4<<20) + 1},
	} {
		if got := ChunkCount(tc.size, tc.chunk); got != tc.count {
			t.Errorf("ChunkCount(%d, %d) = %d, want %d", tc.size, tc.chunk, got, tc.count)
		}
	}
	if IndexSize(2) != HeaderSize+2*RecordSize || IndexSize(-1) != -1 || IndexSize(math.MaxInt64/RecordSize) != -1 {
		t.Error("IndexSize is wrong at its edges")
	}
}

// TestParseKept: a kept index parses back to the same chunks without a manifest, and a
// damaged one is refused.
func TestParseKept(t *testing.T) {
	b := build(t, testImage(5*MinChunkSize+100, MinChunkSize, 7), Options{ChunkSize: MinChunkSize})
	x, err := ParseKept(b.res.Index)
	if err != nil {
		t.Fatal(err)
	}
	want := b.parse(t)
	if x.Count() != want.Count() || x.ImageSize() != want.ImageSize() || x.StoreSize() != want.StoreSize() {
		t.Fatalf("kept index: %d chunks, image %d, store %d; want %d, %d, %d", x.Count(), x.ImageSize(), x.StoreSize(), want.Count(), want.ImageSize(), want.StoreSize())
	}
	for i := range x.Count() {
		if x.Chunk(i) != want.Chunk(i) {
			t.Fatalf("chunk %d: %+v, want %+v", i, x.Chunk(i), want.Chunk(i))
		}
	}
	for name, damage := range map[string]func([]byte) []byte{
		"truncated":    func(b []byte) []byte { return b[:len(b)-1] },
		"short header": func(b []byte) []byte { return b[:10] },
		"bad magic":    func(b []byte) []byte { b[0] ^= 1; return b },
		"huge count":   func(b []byte) []byte { b[23] = 0xff; return b },
		"bad kind":     func(b []byte) []byte { b[HeaderSize+35] = 9; return b },
	} {
		if _, err := ParseKept(damage(append([]byte(nil), b.res.Index...))); ota.CodeOf(err) != ota.CodeIndexMismatch {
			t.Errorf("%s: %v, want index_mismatch", name, err)
		}
	}
}

// TestReleaseBytes: an index knows its file's SHA-256 whether or not it holds
// the file; a version 2 index lets the file go and still reads every chunk
// alike, a version 1 index (whose records are the file) keeps it.
func TestReleaseBytes(t *testing.T) {
	img := make([]byte, 300<<10)
	for i := range img {
		img[i] = byte(i*7 + i>>9)
	}
	for _, tc := range []struct {
		chunking ota.Chunking
		released bool
	}{{ota.ChunkingCDC, true}, {ota.ChunkingFixed, false}} {
		t.Run(string(tc.chunking), func(t *testing.T) {
			b := build(t, img, Options{Chunking: tc.chunking, ChunkSize: 16 << 10, Level: 1})
			x, err := ParseIndex(b.res.Index, b.res.Expect())
			if err != nil {
				t.Fatal(err)
			}
			want := make([]Chunk, x.Count())
			for i := range want {
				want[i] = x.Chunk(i)
			}
			x.ReleaseBytes()
			if got := x.Bytes() == nil; got != tc.released {
				t.Fatalf("bytes released %v, want %v", got, tc.released)
			}
			if x.SHA256() != sha256.Sum256(b.res.Index) {
				t.Fatalf("SHA256() %x, the file's is %x", x.SHA256(), sha256.Sum256(b.res.Index))
			}
			for i, w := range want {
				if got := x.Chunk(i); got != w {
					t.Fatalf("chunk %d after the release: %+v, want %+v", i, got, w)
				}
			}
		})
	}
}
