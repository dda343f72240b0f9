package payload

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/otad/otad/ota"
)

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
	f.Fuzz(func(t *testing.T, data []byte, storeSize, chunkSize, imageSize, count int64) {
		want := Expect{ChunkSize: chunkSize, ChunkCount: count, ImageSize: imageSize, StoreSize: storeSize,
			Compression: ota.CompressionZstd, Chunking: ota.ChunkingCDC}
		if raw, err := decompressUpTo(data, MaxIndexSize); err == nil && len(raw) >= HeaderSize2 {
			h := getHeader2(raw)
			want.ChunkSize, want.ChunkCount, want.ImageSize = int64(h.avg), int64(min(h.count, 1<<40)), int64(min(h.imageSize, 1<<40))
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
// image and the store in order, each within its kind's bounds.
func checkIndex2(t *testing.T, x *Index) {
	t.Helper()
	maxLen := CDCFor(x.ChunkSize()).Max
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
			if c.StoreLength <= 0 || c.StoreLength >= c.Length || int64(c.Length) > maxLen || x.Compression() != ota.CompressionZstd {
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
