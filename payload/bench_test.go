package payload

import (
	"bytes"
	"io"
	"testing"

	"github.com/otad/otad/ota"
)

// BenchmarkBuild cuts a 64 MiB image of mixed content (a third each incompressible,
// compressible and zeros) into 64 KiB chunks.
func BenchmarkBuild(b *testing.B) {
	img := testImage(64<<20, 1<<20, 7)
	b.SetBytes(int64(len(img)))
	for b.Loop() {
		if _, err := Build(b.Context(), bytes.NewReader(img), io.Discard, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecode decodes and checks every chunk of the same image.
func BenchmarkDecode(b *testing.B) {
	img := testImage(64<<20, 1<<20, 7)
	bt := build(b, img, Options{})
	x := bt.parse(b)
	d, err := NewDecoder(x)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	b.SetBytes(int64(len(img)))
	for b.Loop() {
		for i := range x.Count() {
			c := x.Chunk(i)
			if _, err := d.Decode(i, bt.store[c.StoreOffset:c.StoreOffset+int64(c.StoreLength)]); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(bt.res.StoreSize)/float64(len(img)), "store/image")
}

// BenchmarkBuildCDC builds the store otactl sign --chunked writes (content-defined
// 64 KiB chunks, zstd level 19) of the same image, zstd against zstd-prefix: what a
// frame's dictionary costs the signer.
func BenchmarkBuildCDC(b *testing.B) {
	img := testImage(64<<20, 1<<20, 7)
	for _, comp := range []ota.Compression{ota.CompressionZstd, ota.CompressionZstdPrefix} {
		b.Run(string(comp), func(b *testing.B) {
			b.SetBytes(int64(len(img)))
			var size int64
			for b.Loop() {
				res, err := Build(b.Context(), bytes.NewReader(img), io.Discard, Options{Chunking: ota.ChunkingCDC, Level: 19, Compression: comp})
				if err != nil {
					b.Fatal(err)
				}
				size = res.StoreSize
			}
			b.ReportMetric(float64(size)/float64(len(img)), "store/image")
		})
	}
}
