package payload

import (
	"bytes"
	"io"
	"testing"
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
