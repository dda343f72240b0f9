package slots

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/otad/otad/ota"
)

// A slot in memory goes through the same pipeline as a file: download,
// decompress, hash, readback; what is left is the image's digest.
func TestWriteMemSlot(t *testing.T) {
	img := testImage(700_000, 5)
	src := filepath.Join(t.TempDir(), "img.gz")
	if err := os.WriteFile(src, compressed(t, img, "gzip"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		capacity int64
		sha      string
		size     int64
		wantCode ota.Code
	}{
		{"written and read back", 1 << 20, sha(img), int64(len(img)), ""},
		{"exactly the slot's size", int64(len(img)), sha(img), int64(len(img)), ""},
		{"a wrong sha256 leaves no image", 1 << 20, sha(img[1:]), int64(len(img)), ota.CodeHashMismatch},
		{"a longer payload than the manifest says", 1 << 20, sha(img[:1000]), 1000, ota.CodeSizeMismatch},
		{"an image larger than the slot", 600_000, sha(img), int64(len(img)), ota.CodeSizeMismatch}, // "slot dev:B holds 600000 bytes"
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			slot := NewMemSlot("dev:B", tt.capacity)
			var phases []string
			err := Write(t.Context(), Job{URL: "file://" + src, Compression: "gzip", Size: tt.size, SHA256: tt.sha,
				Slot: slot, Readback: true, Progress: func(p Progress) { phases = append(phases, p.Phase) }})
			if got := ota.CodeOf(err); got != tt.wantCode {
				t.Fatalf("Write() = %v, want code %q", err, tt.wantCode)
			}
			size, sum, ok := slot.Image()
			if tt.wantCode != "" {
				if ok {
					t.Fatalf("after %v the slot holds %d bytes %s (%v)", err, size, sum, ok)
				}
				return
			}
			if !ok || size != int64(len(img)) || sum != sha(img) {
				t.Fatalf("slot holds %d bytes %s (%v)", size, sum, ok)
			}
			if phases[len(phases)-1] != PhaseVerifying {
				t.Fatalf("phases %v: no readback", phases)
			}
		})
	}
}

// A second write of a slot in memory while one is open is refused, and a
// write started anew forgets the image held before.
func TestMemSlotOneWriteAtATime(t *testing.T) {
	img := testImage(100_000, 6)
	src := filepath.Join(t.TempDir(), "img")
	if err := os.WriteFile(src, img, 0o600); err != nil {
		t.Fatal(err)
	}
	slot := NewMemSlot("dev:A", 1<<20)
	job := Job{URL: "file://" + src, Size: int64(len(img)), SHA256: sha(img), Slot: slot}
	if err := Write(t.Context(), job); err != nil {
		t.Fatal(err)
	}
	s, err := slot.open(&job)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := slot.Image(); ok {
		t.Fatal("a slot being written still reports its old image")
	}
	if err := Write(t.Context(), job); ota.CodeOf(err) != ota.CodeWriteFailed || !strings.Contains(err.Error(), "being written") {
		t.Fatalf("second write: %v", err)
	}
	s.close()
	if err := Write(t.Context(), job); err != nil {
		t.Fatalf("after the first closed: %v", err)
	}
	if _, sum, ok := slot.Image(); !ok || sum != sha(img) {
		t.Fatal("image lost")
	}
}
