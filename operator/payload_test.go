package operator

import (
	"bytes"
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// TestStreamWindow: a stream payload otactl writes asks a device for at most
// streamWindow bytes of history, the part of an install's memory the payload
// decides (docs/contract/commands.md, sign). An image larger than the window
// would get the encoder's default, 8 MiB, without it.
func TestStreamWindow(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "img")
	// Random halves repeated far apart: only a large window would reach back.
	half := make([]byte, 3<<20)
	rand.Read(half)
	if err := os.WriteFile(img, append(half, half...), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Run("zstd", func(t *testing.T) {
		out := filepath.Join(dir, "p.zst")
		if _, err := preparePayload(context.Background(), img, "zstd", out, nil); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		var h zstd.Header
		if err := h.Decode(data); err != nil {
			t.Fatalf("frame header: %v", err)
		}
		if h.WindowSize == 0 || h.WindowSize > streamWindow {
			t.Errorf("frame window %d bytes, want 1..%d", h.WindowSize, streamWindow)
		}
		// A decoder limited to the window decodes it whole.
		d, err := zstd.NewReader(bytes.NewReader(data), zstd.WithDecoderMaxWindow(streamWindow), zstd.WithDecoderConcurrency(1))
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		var got bytes.Buffer
		if _, err := got.ReadFrom(d); err != nil {
			t.Fatalf("decode within %d bytes of window: %v", streamWindow, err)
		}
		if got.Len() != 2*len(half) {
			t.Errorf("decoded %d bytes, want %d", got.Len(), 2*len(half))
		}
	})
	t.Run("xz", func(t *testing.T) {
		out := filepath.Join(dir, "p.xz")
		if _, err := preparePayload(context.Background(), img, "xz", out, nil); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		// The first block's LZMA2 filter properties (docs: xz file format 5.3.1):
		// stream header 12 bytes, block header size, flags, filter ID 0x21, size 1,
		// the dictionary byte: 2 or 3 times 2^(n/2+11).
		if len(data) < 18 || data[14] != 0x21 {
			t.Fatalf("no LZMA2 filter where the xz format puts it: % x", data[:min(len(data), 18)])
		}
		p := data[16]
		dict := int64(2|p&1) << (p/2 + 11)
		if dict > streamWindow {
			t.Errorf("xz dictionary %d bytes, want at most %d", dict, streamWindow)
		}
	})
}
