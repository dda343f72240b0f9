package device

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/ota"
	"github.com/otad/otad/payload"
	"github.com/otad/otad/slots"
)

// image is n deterministic bytes, half of them zero runs (something for
// gzip to do), and its sha256.
func image(n int, seed byte) ([]byte, string) {
	b := make([]byte, n)
	rand.NewChaCha8([32]byte{seed, 3}).Read(b)
	for off := 0; off < n; off += 8192 {
		clear(b[off:min(off+4096, n)])
	}
	s := sha256.Sum256(b)
	return b, hex.EncodeToString(s[:])
}

func writeFile(t *testing.T, data []byte, gz bool) string {
	t.Helper()
	if gz {
		var buf bytes.Buffer
		w := gzip.NewWriter(&buf)
		w.Write(data)
		w.Close()
		data = buf.Bytes()
	}
	path := filepath.Join(t.TempDir(), "img")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// A slot in memory goes through the same pipeline as a file: download,
// decompress, hash, readback; what is left is the image's digest.
func TestWriteMemSlot(t *testing.T) {
	img, sum := image(700_000, 5)
	short := sha256.Sum256(img[:1000])
	src := writeFile(t, img, true)
	tests := []struct {
		name     string
		capacity int64
		sha      string
		size     int64
		wantCode ota.Code
	}{
		{"written and read back", 1 << 20, sum, int64(len(img)), ""},
		{"exactly the slot's size", int64(len(img)), sum, int64(len(img)), ""},
		{"a wrong sha256 leaves no image", 1 << 20, hex.EncodeToString(short[:]), int64(len(img)), ota.CodeHashMismatch},
		{"a longer payload than the manifest says", 1 << 20, hex.EncodeToString(short[:]), 1000, ota.CodeSizeMismatch},
		{"an image larger than the slot", 600_000, sum, int64(len(img)), ota.CodeSizeMismatch}, // "slot dev:B holds 600000 bytes"
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			slot := NewMemSlot("dev:B", tt.capacity)
			var phases []ota.Phase
			err := slots.Write(t.Context(), slots.Job{Payload: ota.Payload{URL: "file://" + src, Compression: "gzip", Size: tt.size, SHA256: tt.sha},
				Target: slot, Readback: true, Progress: func(p ota.Progress) { phases = append(phases, p.Phase) }})
			if got := ota.CodeOf(err); got != tt.wantCode {
				t.Fatalf("Write() = %v, want code %q", err, tt.wantCode)
			}
			size, got, ok := slot.Image()
			if tt.wantCode != "" {
				if ok {
					t.Fatalf("after %v the slot holds %d bytes %s (%v)", err, size, got, ok)
				}
				return
			}
			if !ok || size != int64(len(img)) || got != sum {
				t.Fatalf("slot holds %d bytes %s (%v)", size, got, ok)
			}
			if phases[len(phases)-1] != ota.Verifying {
				t.Fatalf("phases %v: no readback", phases)
			}
		})
	}
}

// A second write of a slot in memory while one is open is refused, and a
// write started anew forgets the image held before.
func TestMemSlotOneWriteAtATime(t *testing.T) {
	img, sum := image(100_000, 6)
	src := writeFile(t, img, false)
	slot := NewMemSlot("dev:A", 1<<20)
	job := slots.Job{Payload: ota.Payload{URL: "file://" + src, Size: int64(len(img)), SHA256: sum}, Target: slot}
	if err := slots.Write(t.Context(), job); err != nil {
		t.Fatal(err)
	}
	w, err := slot.Open(job.Size)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := slot.Image(); ok {
		t.Fatal("a slot being written still reports its old image")
	}
	if err := slots.Write(t.Context(), job); ota.CodeOf(err) != ota.CodeWriteFailed || !strings.Contains(err.Error(), "being written") {
		t.Fatalf("second write: %v", err)
	}
	w.Close()
	if err := slots.Write(t.Context(), job); err != nil {
		t.Fatalf("after the first closed: %v", err)
	}
	if _, got, ok := slot.Image(); !ok || got != sum {
		t.Fatal("image lost")
	}
}

// TestMemSlotRefusesChunked: the memory slot cannot sync as it goes, so a
// chunked install (which keeps a durable checkpoint of what is on storage)
// refuses it with write_failed once the index is checked, writing nothing.
func TestMemSlotRefusesChunked(t *testing.T) {
	img, sum := image(100_000, 7)
	var store bytes.Buffer
	res, err := payload.Build(t.Context(), bytes.NewReader(img), &store, payload.Options{Level: 1})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := map[string][]byte{"/index": res.Index, "/store": store.Bytes()}[r.URL.Path]
		http.ServeContent(w, r, r.URL.Path, time.Time{}, bytes.NewReader(body))
	}))
	defer srv.Close()
	slot := NewMemSlot("dev:B", 1<<20)
	job := slots.ChunkedJob{
		Job:      slots.Job{Payload: ota.Payload{URL: srv.URL + "/store", Size: int64(len(img)), SHA256: sum}, Target: slot},
		IndexURL: srv.URL + "/index", StateDir: t.TempDir(), Expect: res.Expect(),
	}
	err = slots.WriteChunked(t.Context(), job)
	if ota.CodeOf(err) != ota.CodeWriteFailed || !strings.Contains(err.Error(), "a slot file, a block device") {
		t.Fatalf("WriteChunked into memory = %v, want write_failed naming the slots it takes", err)
	}
	if _, _, ok := slot.Image(); ok {
		t.Error("the refused install left an image in the slot")
	}
}

// Slots sharing a pool write into the memory a finished write left: a
// smaller image after a larger one still verifies (the readback reads
// only what was written, not the larger image's tail), a write that
// fails its hash leaves no image, and the pool keeps at most its bound.
func TestMemSlotPooled(t *testing.T) {
	pool := NewMemPool(1)
	big, bigSum := image(300_000, 8)
	small, smallSum := image(100_000, 9)
	a := NewMemSlot("dev1:B", 1<<20).pooled(pool)
	b := NewMemSlot("dev2:B", 1<<20).pooled(pool)
	write := func(slot *MemSlot, img []byte, sum string) error {
		src := writeFile(t, img, false)
		return slots.Write(t.Context(), slots.Job{Payload: ota.Payload{URL: "file://" + src, Size: int64(len(img)), SHA256: sum}, Target: slot})
	}
	if err := write(a, big, bigSum); err != nil {
		t.Fatal(err)
	}
	if len(pool.free) != 1 {
		t.Fatalf("pool keeps %d mappings after a write, want 1", len(pool.free))
	}
	if err := write(b, small, smallSum); err != nil {
		t.Fatalf("a smaller image into the kept memory: %v", err)
	}
	if _, got, ok := b.Image(); !ok || got != smallSum {
		t.Fatalf("dev2:B holds %q %v, want the small image", got, ok)
	}
	if err := write(a, small, bigSum); ota.CodeOf(err) != ota.CodeHashMismatch {
		t.Fatalf("a wrong hash into kept memory = %v, want hash_mismatch", err)
	}
	if _, _, ok := a.Image(); ok {
		t.Error("a write that failed its hash left an image")
	}
	w1, err := a.Open(1000)
	if err != nil {
		t.Fatal(err)
	}
	w2, err := b.Open(1000)
	if err != nil {
		t.Fatal(err)
	}
	w1.Close()
	w2.Close()
	if len(pool.free) != 1 {
		t.Fatalf("pool keeps %d mappings, over its bound of 1", len(pool.free))
	}
}
