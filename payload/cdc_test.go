package payload

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/otad/otad/internal/testkit/imagetest"
	"github.com/otad/otad/ota"
)

// layout writes files into an image as a file system would: each at a 4 KiB block,
// gap blocks of zeros between them, starting after a header of head blocks.
func layout(files [][]byte, head int, gap func(i int) int) []byte {
	var img bytes.Buffer
	img.Write(make([]byte, head*4096))
	for i, f := range files {
		img.Write(f)
		if pad := (4096 - len(f)%4096) % 4096; pad > 0 {
			img.Write(make([]byte, pad))
		}
		img.Write(make([]byte, gap(i)*4096))
	}
	return img.Bytes()
}

// planAgainst is the plan of installing newImg over a booted slot holding oldImg,
// cut as newImg's index cuts, with the index.
func planAgainst(t testing.TB, oldImg, newImg []byte, opts Options) (*Plan, *Index) {
	t.Helper()
	x := build(t, newImg, opts).parse(t)
	have, err := ScanFor(t.Context(), bytes.NewReader(oldImg), x, int64(len(oldImg)))
	if err != nil {
		t.Fatal(err)
	}
	p, err := MakePlan(x, PlanInput{Booted: have})
	if err != nil {
		t.Fatal(err)
	}
	return p, x
}

// TestCDCRoundTrip: a version 2 payload decodes to its image; an empty image costs a
// few bytes of index and nothing of store.
func TestCDCRoundTrip(t *testing.T) {
	img := layout(imagetest.Files(20, 1), 3, func(i int) int { return i % 5 })
	for _, opts := range []Options{
		{Chunking: ota.ChunkingCDC, ChunkSize: 16 << 10},
		{Chunking: ota.ChunkingCDC, ChunkSize: 64 << 10, Compression: ota.CompressionNone},
	} {
		b := build(t, img, opts)
		x := b.parse(t)
		var out bytes.Buffer
		if err := CheckStore(t.Context(), x, bytes.NewReader(b.store), hexSum(img), &out); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out.Bytes(), img) {
			t.Fatal("the chunks do not make the image")
		}
		p := CDCFor(opts.ChunkSize)
		for i := range x.Count() {
			c := x.Chunk(i)
			if c.Kind != KindZero && int64(c.Length) > p.Max {
				t.Fatalf("chunk %d: %d bytes, more than %d", i, c.Length, p.Max)
			}
			if c.Kind == KindZero && (c.SHA256 != [32]byte{} || c.StoreLength != 0) {
				t.Fatalf("zero run %d: %+v", i, c)
			}
		}
		kept, err := ParseKept(b.res.Index)
		if err != nil || kept.Count() != x.Count() || kept.Chunk(x.Count()-1) != x.Chunk(x.Count()-1) {
			t.Fatalf("kept index: %v", err)
		}
	}
	empty := make([]byte, 3<<30/1024) // 3 MiB of zeros
	b := build(t, empty, Options{Chunking: ota.ChunkingCDC})
	if b.res.ChunkCount != 1 || b.res.StoreSize != 0 || len(b.res.Index) > 100 {
		t.Fatalf("empty image: %d records, store %d, index %d bytes", b.res.ChunkCount, b.res.StoreSize, len(b.res.Index))
	}
}

// TestCDCReusesShiftedFiles: the same files moved by a few blocks (a small file added
// in front, gaps changed) reuse at least 95% of their bytes from the booted slot.
func TestCDCReusesShiftedFiles(t *testing.T) {
	files := imagetest.Files(60, 2)
	oldImg := layout(files, 2, func(i int) int { return i % 3 })
	moved := append([][]byte{bytes.Repeat([]byte("new file "), 1000)}, files...)
	newImg := layout(moved, 2, func(i int) int { return (i + 1) % 4 })
	var unchanged int64
	for _, f := range files {
		unchanged += int64(len(f))
	}
	for _, avg := range []int64{16 << 10, 64 << 10} {
		p, _ := planAgainst(t, oldImg, newImg, Options{Chunking: ota.ChunkingCDC, ChunkSize: avg})
		t.Logf("avg %d: reused %d of %d unchanged bytes (%.1f%%), fetched %d store bytes for a %d-byte image",
			avg, p.BootedBytes, unchanged, 100*float64(p.BootedBytes)/float64(unchanged), p.FetchBytes, len(newImg))
		if p.BootedBytes < unchanged*95/100 {
			t.Errorf("avg %d: reused %d of %d unchanged bytes", avg, p.BootedBytes, unchanged)
		}
		fixed, _ := planAgainst(t, oldImg, newImg, Options{ChunkSize: avg})
		t.Logf("fixed %d: reused %d", avg, fixed.BootedBytes)
	}
}

func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
