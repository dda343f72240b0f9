package demo

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

func image(t *testing.T, spec ImageSpec) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := WriteImage(&b, spec); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestWriteImage(t *testing.T) {
	tests := []struct {
		spec   ImageSpec
		header string
	}{
		{ImageSpec{Version: "2.0.0", Seed: 2, Size: 1 << 20}, "OTAD-DEMO-GOOD version=2.0.0\n"},
		{ImageSpec{Version: "2.1.0", Seed: 3, Size: 1<<20 + 7, Broken: true}, "OTAD-DEMO-BROKEN version=2.1.0\n"},
		{ImageSpec{Version: "x", Size: int64(len("OTAD-DEMO-GOOD version=x\n"))}, "OTAD-DEMO-GOOD version=x\n"},
	}
	for _, tt := range tests {
		b := image(t, tt.spec)
		if int64(len(b)) != tt.spec.Size {
			t.Errorf("%+v: %d bytes", tt.spec, len(b))
		}
		if !strings.HasPrefix(string(b), tt.header) {
			t.Errorf("%+v: starts with %q", tt.spec, b[:min(len(b), 40)])
		}
		if !bytes.Equal(b, image(t, tt.spec)) {
			t.Errorf("%+v: not deterministic", tt.spec)
		}
	}
	a := image(t, ImageSpec{Version: "1", Seed: 1, Size: 64 << 10})
	b := image(t, ImageSpec{Version: "1", Seed: 2, Size: 64 << 10})
	if bytes.Equal(a, b) {
		t.Error("different seeds, same image")
	}
	if err := WriteImage(&bytes.Buffer{}, ImageSpec{Version: "2.0.0", Size: 10}); err == nil {
		t.Error("an image smaller than its header was written")
	}
}

// The image compresses, but not to nothing: the demo shows a real ratio.
func TestImageCompresses(t *testing.T) {
	img := image(t, ImageSpec{Version: "2.0.0", Seed: 2, Size: 4 << 20})
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	n := len(enc.EncodeAll(img, nil))
	if n > len(img)/2 || n < len(img)/randomShare {
		t.Errorf("zstd: %d of %d bytes", n, len(img))
	}
}

func TestWriteImageFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "img")
	spec := ImageSpec{Version: "2.0.0", Size: 4096}
	sum, err := WriteImageFile(path, spec)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path); err != nil || !bytes.Equal(b, image(t, spec)) || sum != fmt.Sprintf("%x", sha256.Sum256(b)) {
		t.Fatalf("file differs (err %v) or sum %s is not its SHA-256", err, sum)
	}
	if _, err := WriteImageFile(path, spec); err == nil {
		t.Error("an existing file was overwritten")
	}
	bad := filepath.Join(dir, "bad")
	if _, err := WriteImageFile(bad, ImageSpec{Version: "2.0.0", Size: 3}); err == nil {
		t.Error("a too small image was written")
	}
	if _, err := os.Stat(bad); !os.IsNotExist(err) {
		t.Errorf("a failed image was left behind: %v", err)
	}
}

// TestWriteVariantFile: the variant differs from its base in the chunks it
// says, its header included, and nowhere else.
func TestWriteVariantFile(t *testing.T) {
	dir := t.TempDir()
	base, next := filepath.Join(dir, "base.img"), filepath.Join(dir, "next.img")
	const size, cs = 1 << 20, 64 << 10
	if _, err := WriteImageFile(base, ImageSpec{Version: "2.0.0", Seed: 2, Size: size}); err != nil {
		t.Fatal(err)
	}
	sum, changed, err := WriteVariantFile(next, base, ImageSpec{Version: "2.1.0", Broken: true, Seed: 3, Size: size}, cs)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(base)
	b, _ := os.ReadFile(next)
	if s := sha256.Sum256(b); hex.EncodeToString(s[:]) != sum || len(b) != size || !strings.HasPrefix(string(b), BrokenMarker+" version=2.1.0\n") {
		t.Fatalf("variant: %d bytes, sum %s, starts %q", len(b), sum, b[:40])
	}
	differ := 0
	for off := 0; off < size; off += cs {
		if !bytes.Equal(a[off:off+cs], b[off:off+cs]) {
			differ++
		}
	}
	if differ != changed || changed != 3 {
		t.Fatalf("%d chunks differ, WriteVariantFile says %d, want 3", differ, changed)
	}
}
