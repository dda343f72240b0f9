package payload

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/otad/otad/ota"
)

// FuzzParseIndex feeds hostile indexes and manifest values. With fromHeader the
// manifest values are taken from the index's own header (and its size and sha256 from
// the bytes), so the fuzzer gets past those checks to the records. Whatever is
// accepted must keep every promise ParseIndex makes.
func FuzzParseIndex(f *testing.F) {
	img := testImage(100<<10+7, 5000, 1)
	for _, opts := range []Options{{ChunkSize: 4 << 10}, {ChunkSize: 8 << 10, Compression: ota.CompressionNone}} {
		res := build(f, img, opts).res
		f.Add(res.Index, res.StoreSize, res.ChunkSize, res.ImageSize, res.ChunkCount, true)
	}
	data, want := sampleIndex()
	f.Add(data, want.StoreSize, want.ChunkSize, want.ImageSize, want.ChunkCount, true)
	f.Add(data, want.StoreSize, want.ChunkSize, want.ImageSize, want.ChunkCount, false)
	f.Add(data, int64(-1), int64(4096), int64(1<<62), int64(1<<50), false)
	f.Fuzz(func(t *testing.T, data []byte, storeSize, chunkSize, imageSize, count int64, fromHeader bool) {
		want := Expect{ChunkSize: chunkSize, ChunkCount: count, ImageSize: imageSize, StoreSize: storeSize, Compression: ota.CompressionZstd}
		if fromHeader && len(data) >= HeaderSize {
			want.ChunkSize = int64(binary.LittleEndian.Uint32(data[8:]))
			want.ChunkCount = int64(binary.LittleEndian.Uint64(data[16:]))
			want.ImageSize = int64(binary.LittleEndian.Uint64(data[24:]))
			if data[12] == compNone {
				want.Compression = ota.CompressionNone
			}
		}
		want = expectFor(data, want)
		x, err := ParseIndex(data, want)
		if err != nil {
			var e *ota.Error
			if !errors.As(err, &e) || e.Code != ota.CodeIndexMismatch {
				t.Fatalf("refusal is not an index_mismatch *Error: %v", err)
			}
			return
		}
		if int64(x.Count()) != ChunkCount(x.ImageSize(), x.ChunkSize()) || !ValidChunkSize(x.ChunkSize()) {
			t.Fatalf("accepted %d chunks of %d for %d bytes", x.Count(), x.ChunkSize(), x.ImageSize())
		}
		var off, image int64
		for i := range x.Count() {
			c := x.Chunk(i)
			if c.StoreOffset != off || c.Offset != image || c.Length <= 0 || int64(c.Length) > x.ChunkSize() {
				t.Fatalf("chunk %d: %+v at store %d image %d", i, c, off, image)
			}
			switch c.Kind {
			case KindZero:
				if c.StoreLength != 0 || c.SHA256 != zeroSum(int64(c.Length)) {
					t.Fatalf("chunk %d: bad zero chunk %+v", i, c)
				}
			case KindRaw:
				if c.StoreLength != c.Length {
					t.Fatalf("chunk %d: bad raw chunk %+v", i, c)
				}
			case KindZstd:
				if c.StoreLength <= 0 || c.StoreLength >= c.Length || x.Compression() != ota.CompressionZstd {
					t.Fatalf("chunk %d: bad zstd chunk %+v", i, c)
				}
			default:
				t.Fatalf("chunk %d: kind %v", i, c.Kind)
			}
			off += int64(c.StoreLength)
			image += int64(c.Length)
		}
		if off != x.StoreSize() || image != x.ImageSize() {
			t.Fatalf("chunks cover store %d of %d, image %d of %d", off, x.StoreSize(), image, x.ImageSize())
		}
	})
}

// FuzzDecodeChunk decodes hostile stored bytes for a chunk whose index entry says it
// is content. Only content itself may come out; everything else is chunk_mismatch.
func FuzzDecodeChunk(f *testing.F) {
	enc := func(b []byte) []byte { return encodeAll(f, b) }
	content := text(decCS, 0)
	f.Add(content, enc(content), false)
	f.Add(content[:1000], enc(content[:1000]), false)
	f.Add(content, enc(text(2*decCS, 0)), false)
	f.Add(content, hugeFrame(), false)
	f.Add(content, encodeStream(f, make([]byte, 1<<20), smallWindow...), false)
	f.Add([]byte{1, 2, 3}, []byte{1, 2, 3}, true)
	f.Fuzz(func(t *testing.T, content, stored []byte, raw bool) {
		if len(content) == 0 || len(content) > decCS {
			return
		}
		kind := KindZstd
		if raw || len(stored) >= len(content) {
			// A record must store raw what does not compress; a raw record's
			// stored bytes are as long as the chunk.
			kind = KindRaw
			stored = append(stored, make([]byte, len(content))...)[:len(content)]
		}
		if len(stored) == 0 {
			return
		}
		got, err := oneChunk(t, content, kind, len(stored)).Decode(0, stored)
		if err != nil {
			if ota.CodeOf(err) != ota.CodeChunkMismatch {
				t.Fatalf("refusal is not chunk_mismatch: %v", err)
			}
			return
		}
		if !bytes.Equal(got, content) {
			t.Fatalf("accepted %d bytes that are not the chunk", len(got))
		}
	})
}

// FuzzParseKept: a kept index from the state directory never panics, and what it
// accepts is an index ParseIndex accepts with the values it read from it.
func FuzzParseKept(f *testing.F) {
	var store bytes.Buffer
	res, err := Build(f.Context(), bytes.NewReader(testImage(40<<10+7, 5000, 2)), &store, Options{ChunkSize: 4 << 10})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(res.Index)
	data, _ := sampleIndex()
	f.Add(data)
	f.Add(data[:HeaderSize])
	f.Fuzz(func(t *testing.T, data []byte) {
		x, err := ParseKept(data)
		if err != nil {
			return
		}
		if x.Count() == 0 || x.ImageSize() <= 0 || int64(len(data)) != IndexSize(int64(x.Count())) {
			t.Fatalf("accepted %d chunks, image %d, from %d bytes", x.Count(), x.ImageSize(), len(data))
		}
		last := x.Chunk(x.Count() - 1)
		if last.StoreOffset+int64(last.StoreLength) != x.StoreSize() {
			t.Fatalf("store lengths end at %d, store size %d", last.StoreOffset+int64(last.StoreLength), x.StoreSize())
		}
	})
}

// FuzzParseIndex2 feeds hostile version 2 indexes: compressed bytes as fetched, with
// the manifest's values taken from their own header when it decompresses (so the
// fuzzer gets past them to the records), else as given. Whatever is accepted keeps
// every promise ParseIndex makes.
func FuzzParseIndex2(f *testing.F) {
	b := build(f, layout2Example(), Options{ChunkSize: 4096, Chunking: ota.ChunkingCDC})
	f.Add(b.res.Index, b.res.StoreSize, int64(4096), b.res.ImageSize, b.res.ChunkCount)
	raw, _ := decompressExact(b.res.Index, IndexSize2(b.res.ChunkCount))
	f.Add(raw, b.res.StoreSize, int64(4096), b.res.ImageSize, b.res.ChunkCount)
	f.Add([]byte{0x28, 0xb5, 0x2f, 0xfd}, int64(0), int64(4096), int64(1), int64(1))
	pb := build(f, layout2Example(), Options{ChunkSize: 4096, Chunking: ota.ChunkingCDC, Compression: ota.CompressionZstdPrefix})
	f.Add(pb.res.Index, pb.res.StoreSize, int64(4096), pb.res.ImageSize, pb.res.ChunkCount)
	lb := build(f, layout2Example(), Options{ChunkSize: 4096, Chunking: ota.ChunkingCDC, Compression: ota.CompressionZstdPrefix, PrefixSize: 16 << 10})
	f.Add(lb.res.Index, lb.res.StoreSize, int64(4096), lb.res.ImageSize, lb.res.ChunkCount)
	f.Fuzz(func(t *testing.T, data []byte, storeSize, chunkSize, imageSize, count int64) {
		want := Expect{ChunkSize: chunkSize, ChunkCount: count, ImageSize: imageSize, StoreSize: storeSize,
			Compression: ota.CompressionZstd, Chunking: ota.ChunkingCDC}
		if raw, err := decompressUpTo(data, MaxIndexSize); err == nil && len(raw) >= HeaderSize2 {
			h := getHeader2(raw)
			want.ChunkSize, want.ChunkCount, want.ImageSize = int64(h.avg), int64(min(h.count, 1<<40)), int64(min(h.imageSize, 1<<40))
			if h.compression == compZstdPrefix {
				want.Compression = ota.CompressionZstdPrefix
			}
		}
		want = expectFor(data, want)
		x, err := ParseIndex(data, want)
		if err != nil {
			var e *ota.Error
			if !errors.As(err, &e) || e.Code != ota.CodeIndexMismatch {
				t.Fatalf("refusal is not an index_mismatch *Error: %v", err)
			}
			return
		}
		checkIndex2(t, x)
	})
}

// checkIndex2 asserts what an accepted version 2 index promises: chunks that tile the
// image and the store in order, each within its kind's bounds, and with zstd-prefix a
// dictionary bound of 2 × max_size or a power of two from there to MaxPrefixSize.
func checkIndex2(t *testing.T, x *Index) {
	t.Helper()
	maxLen := CDCFor(x.ChunkSize()).Max
	if n := PrefixSize(x); x.Prefixed() && n != 2*maxLen && (n&(n-1) != 0 || n < 2*maxLen || n > MaxPrefixSize) || !x.Prefixed() && n != 0 {
		t.Fatalf("prefix size %d for chunks of at most %d, compression %s", n, maxLen, x.Compression())
	}
	var off, image int64
	for i := range x.Count() {
		c := x.Chunk(i)
		if c.StoreOffset != off || c.Offset != image || c.Length <= 0 {
			t.Fatalf("chunk %d: %+v at store %d image %d", i, c, off, image)
		}
		switch c.Kind {
		case KindZero:
			if c.StoreLength != 0 || c.SHA256 != [32]byte{} || c.Length > MaxZeroRun {
				t.Fatalf("chunk %d: bad zero run %+v", i, c)
			}
		case KindRaw:
			if c.StoreLength != c.Length || int64(c.Length) > maxLen {
				t.Fatalf("chunk %d: bad raw chunk %+v", i, c)
			}
		case KindZstd:
			if c.StoreLength <= 0 || c.StoreLength >= c.Length || int64(c.Length) > maxLen || x.Compression() != ota.CompressionZstd && !x.Prefixed() {
				t.Fatalf("chunk %d: bad zstd chunk %+v", i, c)
			}
		default:
			t.Fatalf("chunk %d: kind %v", i, c.Kind)
		}
		off += int64(c.StoreLength)
		image += int64(c.Length)
	}
	if off != x.StoreSize() || image != x.ImageSize() {
		t.Fatalf("chunks cover store %d of %d, image %d of %d", off, x.StoreSize(), image, x.ImageSize())
	}
}

// fuzzPair is a small older and newer image and the deltas between them.
func fuzzPair(t testing.TB) deltaPair {
	oldImg := testImage(200<<10, 9000, 5)
	newImg := append(append(bytes.Clone(oldImg[:50<<10]), []byte("inserted bytes")...), oldImg[50<<10:]...)
	newImg[150<<10] ^= 0xff
	return makeDeltaPair(t, oldImg, newImg, Options{Chunking: ota.ChunkingCDC, ChunkSize: 16 << 10})
}

// FuzzParseDelta feeds hostile delta indexes for a fixed index, the manifest's count
// and sizes taken from the header when it decompresses. Whatever is accepted keeps
// ParseDelta's promises: records in order, of chunks that are not zeros, deltas
// shorter than the chunks as stored tiling the file, dictionaries inside the older
// image and within MaxDict.
func FuzzParseDelta(f *testing.F) {
	p := fuzzPair(f)
	f.Add(p.res.Index, p.res.Size())
	raw, _ := decompressExact(p.res.Index, DeltaIndexSize(p.res.Count))
	f.Add(raw, p.res.Size())
	f.Fuzz(func(t *testing.T, data []byte, size int64) {
		want := DeltaExpect{From: p.res.Expect().From, FromSize: p.res.FromSize, Count: 1, Size: size}
		if raw, err := decompressUpTo(data, MaxIndexSize); err == nil && len(raw) >= DeltaHeaderSize {
			want.Count = int64((len(raw) - DeltaHeaderSize) / DeltaRecordSize)
			want.FromSize = int64(binary.LittleEndian.Uint64(raw[72:80]))
		}
		want.IndexSize, want.IndexSHA256 = int64(len(data)), expectFor(data, Expect{}).IndexSHA256
		d, err := ParseDelta(data, want, p.x, "delta")
		if err != nil {
			if ota.CodeOf(err) != ota.CodeIndexMismatch {
				t.Fatalf("refusal is not index_mismatch: %v", err)
			}
			return
		}
		off := want.IndexSize
		for k := range d.Count() {
			dc := d.At(k)
			c := p.x.Chunk(dc.Chunk)
			if dc.Offset != off || c.Kind == KindZero || dc.Length < 1 || dc.Length >= c.StoreLength || (k > 0 && dc.Chunk <= d.At(k-1).Chunk) {
				t.Fatalf("record %d: %+v for chunk %+v", k, dc, c)
			}
			if dc.N < 1 || dc.N > MaxRanges || dc.DictLen() > MaxDict(p.x) {
				t.Fatalf("record %d: ranges %+v", k, dc)
			}
			for _, r := range dc.Ranges[:dc.N] {
				if r.Len < 1 || r.Off < 0 || r.Off+r.Len > d.FromSize {
					t.Fatalf("record %d: range %+v outside %d", k, r, d.FromSize)
				}
			}
			off += int64(dc.Length)
		}
		if off != size {
			t.Fatalf("deltas end at %d of %d", off, size)
		}
	})
}

// FuzzDecodeDelta decodes hostile deltas and older bytes for a chunk: only the chunk
// itself may come out; everything else is chunk_mismatch.
func FuzzDecodeDelta(f *testing.F) {
	p := fuzzPair(f)
	d := p.parse(f)
	if d.Count() == 0 {
		f.Fatal("no deltas")
	}
	dc := d.At(0)
	f.Add(p.frame(dc), p.oldImg[:0])
	f.Add(p.frame(dc), []byte{1, 2, 3})
	f.Add(encodeAll(f, text(1000, 0)), p.oldImg[:100])
	f.Fuzz(func(t *testing.T, frame, damage []byte) {
		dec, err := NewDeltaDecoder(p.x)
		if err != nil {
			t.Fatal(err)
		}
		defer dec.Close()
		old := bytes.Clone(p.oldImg)
		r := dc.Ranges[0]
		copy(old[r.Off:r.Off+r.Len], damage) // older bytes altered, as a booted slot may be
		c := dc
		c.Length = len(frame)
		got, err := dec.Decode(c, frame, bytes.NewReader(old))
		if err != nil {
			if ota.CodeOf(err) != ota.CodeChunkMismatch {
				t.Fatalf("refusal is not chunk_mismatch: %v", err)
			}
			return
		}
		ch := p.x.Chunk(dc.Chunk)
		if !bytes.Equal(got, p.newImg[ch.Offset:ch.Offset+int64(ch.Length)]) {
			t.Fatal("accepted bytes that are not the chunk")
		}
	})
}

// FuzzDecodePrefix feeds a zstd-prefix decoder hostile frames and altered prefixes:
// whatever it accepts is the chunk itself, and every refusal is a chunk_mismatch.
func FuzzDecodePrefix(f *testing.F) {
	block := testImage(20<<10, 20<<10, 4)
	img := append(append(bytes.Clone(block), text(8<<10, 1)...), block...)
	b := build(f, img, Options{ChunkSize: 4096, Chunking: ota.ChunkingCDC, Compression: ota.CompressionZstdPrefix})
	x := b.parse(f)
	k := -1
	for i := range x.Count() {
		if c := x.Chunk(i); c.Kind == KindZstd && c.Offset >= 20<<10 {
			k = i
			break
		}
	}
	if k < 0 {
		f.Fatal("no zstd chunk with a prefix")
	}
	c := x.Chunk(k)
	frame := b.store[c.StoreOffset : c.StoreOffset+int64(c.StoreLength)]
	f.Add(frame, []byte{}, 0)
	f.Add(frame, []byte{1, 2, 3}, 100)
	f.Add(encodeAll(f, text(1000, 0)), []byte{}, 0)
	f.Add(hugeFrame(), []byte{}, 0)
	f.Add(frame, []byte{}, -1)
	f.Fuzz(func(t *testing.T, frame, damage []byte, cut int) {
		d, err := NewPrefixDecoder(x)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		from := max(0, c.Offset-PrefixSize(x))
		prefix := bytes.Clone(img[from:c.Offset])
		copy(prefix[min(len(prefix), max(cut, 0)):], damage)
		if cut < 0 {
			prefix = prefix[min(len(prefix), -cut):]
		}
		// Cut or padded to the record's length, so that it gets past that check.
		frame = append(frame, make([]byte, c.StoreLength)...)[:c.StoreLength]
		got, err := d.Decode(k, frame, prefix)
		if err != nil {
			if ota.CodeOf(err) != ota.CodeChunkMismatch {
				t.Fatalf("refusal is not chunk_mismatch: %v", err)
			}
			return
		}
		if !bytes.Equal(got, img[c.Offset:c.Offset+int64(c.Length)]) {
			t.Fatal("accepted bytes that are not the chunk")
		}
	})
}
