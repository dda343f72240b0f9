package payload

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// TestCopyFrameDecodes: a copy frame of n bytes decodes, with a raw dictionary of n
// bytes, to the dictionary, in one block or several; it is never longer than
// CopyFrameSize, and with another dictionary it decodes to that one (a slot whose
// bytes changed makes another chunk, which its hash refuses).
func TestCopyFrameDecodes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{3, 34, 131074, 131075, 262146, 35, 100, 4096, 12345, 48 << 10, 65539, 128 << 10, 128<<10 + 1, 300001, 2 << 20} {
		dict := make([]byte, n)
		for i := range dict {
			dict[i] = byte(rng.Uint32())
		}
		f := copyFrame(n)
		if len(f) > CopyFrameSize(n) {
			t.Errorf("%d bytes: frame of %d, more than %d", n, len(f), CopyFrameSize(n))
		}
		d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderDictRaw(0, dict), zstd.WithDecoderMaxWindow(8<<20))
		if err != nil {
			t.Fatal(err)
		}
		out, err := d.DecodeAll(f, nil)
		if err != nil || !bytes.Equal(out, dict) {
			t.Fatalf("%d bytes: frame of %d decodes to %d bytes (%v)", n, len(f), len(out), err)
		}
		other := bytes.Clone(dict)
		other[n/2] ^= 1
		if err := d.ResetWithOptions(nil, zstd.WithDecoderDictRaw(0, other)); err != nil {
			t.Fatal(err)
		}
		if out, err := d.DecodeAll(f, nil); err != nil || !bytes.Equal(out, other) {
			t.Fatalf("%d bytes, another dictionary: %v", n, err)
		}
		d.Close()
	}
}
