package main

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"path/filepath"
	"testing"
)

// TestKindsDecode: the zstd and stored xz payloads decode, with the
// decoders the ideal uses, to the image itself (odd sizes cross a chunk).
func TestKindsDecode(t *testing.T) {
	for _, size := range []int64{1, 65536, 65537, 3<<20 + 5} {
		image := filepath.Join(t.TempDir(), "image.bin")
		want, err := generate(image, size)
		if err != nil {
			t.Fatal(err)
		}
		kinds, err := makeKinds(image)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range kinds {
			r, done, err := decoder(k)
			if err != nil {
				t.Fatalf("%d bytes, %s: %v", size, k.name, err)
			}
			h := sha256.New()
			n, err := io.Copy(h, r)
			done()
			if err != nil || n != size || hex.EncodeToString(h.Sum(nil)) != want {
				t.Errorf("%d bytes, %s: decoded %d bytes (%v), sha256 match %v", size, k.name, n, err, hex.EncodeToString(h.Sum(nil)) == want)
			}
		}
	}
}
