package payload

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"testing"

	"github.com/otad/otad/ota"
)

// TestPrefixStore: a zstd-prefix store of an image whose bytes repeat 160 KiB apart
// (as a file's copy does) is much smaller than the zstd store of the same chunks,
// decodes back to the image in order, and each chunk decodes only with the exact
// bytes before it: another prefix, a prefix of another length, or a decoder without
// one is a chunk_mismatch. So for a prefix of 2 × max_size (the header says 0, as
// older devices read it) and a longer one (the header says it).
func TestPrefixStore(t *testing.T) {
	block := testImage(160<<10, 160<<10, 9) // incompressible alone
	var img []byte
	for i := range 12 {
		block[(i*7919)%len(block)]++ // each copy a little different
		img = append(img, block...)
	}
	alone := build(t, img, Options{Chunking: ota.ChunkingCDC, Level: 19})
	legacy := 2 * CDCFor(DefaultChunkSize).Max
	for _, tc := range []struct {
		prefix, field int64
	}{
		{legacy, 0},
		{512 << 10, 512 << 10},
	} {
		t.Run(fmt.Sprint(tc.prefix), func(t *testing.T) {
			b := build(t, img, Options{Chunking: ota.ChunkingCDC, Level: 19, Compression: ota.CompressionZstdPrefix, PrefixSize: tc.prefix})
			t.Logf("%d bytes: zstd store %d, zstd-prefix store %d", len(img), alone.res.StoreSize, b.res.StoreSize)
			if b.res.StoreSize >= alone.res.StoreSize/4 {
				t.Errorf("zstd-prefix store %d bytes, not a quarter of the zstd store's %d", b.res.StoreSize, alone.res.StoreSize)
			}
			x := b.parse(t)
			raw, err := decompressExact(b.res.Index, IndexSize2(int64(x.Count())))
			if err != nil {
				t.Fatal(err)
			}
			if f := getHeader2(raw).prefix; int64(f) != tc.field || PrefixSize(x) != tc.prefix {
				t.Fatalf("header prefix_size %d, PrefixSize %d; want %d, %d", f, PrefixSize(x), tc.field, tc.prefix)
			}
			checkPrefixStore(t, img, b, x)
		})
	}
}

// checkPrefixStore: b, the zstd-prefix store of img whose index is x, decodes to img
// in order, and a chunk decodes only with the exact bytes before it.
func checkPrefixStore(t *testing.T, img []byte, b built, x *Index) {
	if b.res.Compression != ota.CompressionZstdPrefix || b.res.Chunks("u").Compression != ota.CompressionZstdPrefix {
		t.Fatalf("result says compression %q", b.res.Compression)
	}
	if !x.Prefixed() || x.Compression() != ota.CompressionZstdPrefix {
		t.Fatalf("index compression %q", x.Compression())
	}
	var out bytes.Buffer
	if err := CheckStore(t.Context(), x, bytes.NewReader(b.store), hex.EncodeToString(b.res.ImageSHA256[:]), &out); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), img) {
		t.Fatal("decoded chunks differ from the image")
	}
	kept, err := ParseKept(b.res.Index)
	if err != nil || !kept.Prefixed() || PrefixSize(kept) != PrefixSize(x) {
		t.Fatalf("kept index: %v, prefixed %v", err, err == nil && kept.Prefixed())
	}
	checkPrefixChunk(t, img, b, x)
}

func checkPrefixChunk(t *testing.T, img []byte, b built, x *Index) {
	pd, err := NewPrefixDecoder(x)
	if err != nil {
		t.Fatal(err)
	}
	defer pd.Close()
	d, err := NewDecoder(x)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	// A zstd chunk past the first PrefixSize bytes: its prefix is whole.
	k := -1
	for i := range x.Count() {
		if c := x.Chunk(i); c.Kind == KindZstd && c.Offset > PrefixSize(x) {
			k = i
			break
		}
	}
	if k < 0 {
		t.Fatal("no zstd chunk past the first prefix")
	}
	c := x.Chunk(k)
	stored := b.store[c.StoreOffset : c.StoreOffset+int64(c.StoreLength)]
	prefix := img[c.Offset-PrefixSize(x) : c.Offset]
	if got, err := pd.Decode(k, stored, prefix); err != nil || !bytes.Equal(got, img[c.Offset:c.Offset+int64(c.Length)]) {
		t.Fatalf("chunk %d with its prefix: %v", k, err)
	}
	changed := bytes.Clone(prefix)
	for i := range changed {
		changed[i] ^= 0x5a // every byte: wherever the frame's matches point
	}
	corrupt := bytes.Clone(stored)
	corrupt[len(corrupt)/2] ^= 0xff
	for _, tc := range []struct {
		name           string
		stored, prefix []byte
	}{
		{"another prefix", stored, changed},
		{"a prefix one byte short", stored, prefix[1:]},
		{"no prefix", stored, nil},
		{"a corrupt frame", corrupt, prefix},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := pd.Decode(k, tc.stored, tc.prefix)
			wantErr(t, err, ota.CodeChunkMismatch, "store.chunk[")
		})
	}
	_, err = d.Decode(k, stored)
	wantErr(t, err, ota.CodeChunkMismatch, "bytes before it")
}

// TestPrefixNeedsCDC: a manifest naming zstd-prefix for fixed chunks is refused.
func TestPrefixNeedsCDC(t *testing.T) {
	b := build(t, testImage(256<<10, 10000, 3), Options{})
	w := b.res.Expect()
	w.Compression = ota.CompressionZstdPrefix
	wantErr(t, w.Validate(), ota.CodeIndexMismatch, "payload.chunks.compression", "cdc")
	// An index of zstd chunks offered as zstd-prefix: its header says otherwise.
	c := build(t, testImage(256<<10, 10000, 3), Options{Chunking: ota.ChunkingCDC})
	w = c.res.Expect()
	w.Compression = ota.CompressionZstdPrefix
	_, err := ParseIndex(c.res.Index, w)
	wantErr(t, err, ota.CodeIndexMismatch, "index.header.compression")
}

// TestHistory keeps the last bytes, zero runs included, whatever the sizes added.
func TestHistory(t *testing.T) {
	h := NewHistory(10)
	var all []byte
	add := func(b []byte) { h.Add(b); all = append(all, b...) }
	zeros := func(n int) { h.AddZeros(int64(n)); all = append(all, make([]byte, n)...) }
	check := func(step string) {
		t.Helper()
		want := all[max(0, len(all)-10):]
		if !bytes.Equal(h.Bytes(), want) {
			t.Fatalf("after %s: %q, want %q", step, h.Bytes(), want)
		}
	}
	check("nothing")
	add([]byte("abc"))
	check("3 bytes")
	add([]byte("defghijk"))
	check("11 bytes")
	for i := range 30 {
		add([]byte{byte('A' + i%26)})
		check("one more byte")
	}
	zeros(3)
	check("3 zeros")
	add([]byte("0123456789abcdef"))
	check("16 bytes at once")
	zeros(12)
	check("a zero run longer than kept")
	add([]byte("xy"))
	check("2 bytes")
	for i := range 40 { // sizes that fill the buffer at every offset
		n := []int{9, 1, 4, 7, 3}[i%5]
		if i%3 == 0 {
			zeros(n)
		} else {
			add(bytes.Repeat([]byte{byte('a' + i%26)}, n))
		}
		check(fmt.Sprintf("%d bytes", n))
	}
	h.Reset()
	all = nil
	check("reset")
}

// TestBuildWorkers: a content-defined store is the same, byte for byte and record
// for record, whatever the number of workers compressing its chunks (one, or more
// than there are jobs in flight at once), for each compression: the chunks are
// written in image order, each with the bytes before it.
func TestBuildWorkers(t *testing.T) {
	img := testImage(3<<20, 96<<10, 11) // incompressible, compressible and zero runs
	copy(img[2<<20:], img[:256<<10])    // and bytes a prefix finds again
	for _, comp := range []ota.Compression{ota.CompressionZstdPrefix, ota.CompressionZstd, ota.CompressionNone} {
		t.Run(string(comp), func(t *testing.T) {
			one := build(t, img, Options{Chunking: ota.ChunkingCDC, Level: 19, Compression: comp, Workers: 1})
			for _, n := range []int{3, 0} {
				b := build(t, img, Options{Chunking: ota.ChunkingCDC, Level: 19, Compression: comp, Workers: n})
				if !bytes.Equal(b.res.Index, one.res.Index) || !bytes.Equal(b.store, one.store) {
					t.Fatalf("%d workers: index %d bytes, store %d; one worker: %d, %d", n, len(b.res.Index), len(b.store), len(one.res.Index), len(one.store))
				}
			}
			if one.res.Zero == 0 || one.res.Raw == 0 || comp != ota.CompressionNone && one.res.Zstd == 0 {
				t.Fatalf("chunks: %d zero, %d raw, %d zstd", one.res.Zero, one.res.Raw, one.res.Zstd)
			}
			var out bytes.Buffer
			x := one.parse(t)
			if err := CheckStore(t.Context(), x, bytes.NewReader(one.store), hex.EncodeToString(one.res.ImageSHA256[:]), &out); err != nil || !bytes.Equal(out.Bytes(), img) {
				t.Fatalf("the store does not decode to the image: %v", err)
			}
		})
	}
}

// TestPrefixSizeField: the header's prefix_size of a zstd-prefix index is 0 (2 ×
// max_size, as signed before the field) or a power of two from 2 × max_size to
// MaxPrefixSize; anything else, or a prefix_size in a zstd store, is refused as
// index_mismatch naming it. Build refuses to write what a device would refuse.
func TestPrefixSizeField(t *testing.T) {
	img := layout2Example()
	legacy := 2 * CDCFor(4096).Max // 16 KiB
	for _, tc := range []struct {
		name  string
		comp  ota.Compression
		field uint32
		want  int64 // PrefixSize, or -1: refused
	}{
		{"zero: 2 × max_size", ota.CompressionZstdPrefix, 0, legacy},
		{"2 × max_size", ota.CompressionZstdPrefix, uint32(legacy), legacy},
		{"twice that", ota.CompressionZstdPrefix, uint32(2 * legacy), 2 * legacy},
		{"the most", ota.CompressionZstdPrefix, MaxPrefixSize, MaxPrefixSize},
		{"past the most", ota.CompressionZstdPrefix, 2 * MaxPrefixSize, -1},
		{"below 2 × max_size", ota.CompressionZstdPrefix, uint32(legacy / 2), -1},
		{"not a power of two", ota.CompressionZstdPrefix, uint32(3 * legacy), -1},
		{"in a zstd store", ota.CompressionZstd, uint32(2 * legacy), -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := build(t, img, Options{ChunkSize: 4096, Chunking: ota.ChunkingCDC, Compression: tc.comp})
			want := b.res.Expect()
			raw, err := decompressExact(b.res.Index, IndexSize2(want.ChunkCount))
			if err != nil {
				t.Fatal(err)
			}
			binary.LittleEndian.PutUint32(raw[48:52], tc.field)
			file, err := compressIndex(raw)
			if err != nil {
				t.Fatal(err)
			}
			x, err := ParseIndex(file, expectFor(file, want))
			if tc.want < 0 {
				wantErr(t, err, ota.CodeIndexMismatch, "index.header.prefix_size")
				_, err = Build(t.Context(), bytes.NewReader(img), io.Discard, Options{ChunkSize: 4096, Chunking: ota.ChunkingCDC, Compression: tc.comp, PrefixSize: int64(tc.field)})
				if err == nil {
					t.Fatalf("Build wrote a prefix size of %d", tc.field)
				}
				return
			}
			if err != nil || PrefixSize(x) != tc.want {
				t.Fatalf("PrefixSize %d, want %d: %v", PrefixSize(x), tc.want, err)
			}
		})
	}
}
