package slots

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"

	"github.com/otad/otad/backoff"
	"github.com/otad/otad/ota"
)

// testImage returns size deterministic bytes: pseudo-random runs mixed with
// zero runs, so that compressors have something to do but not too much.
func testImage(size int, seed uint64) []byte {
	b := make([]byte, size)
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), 1})
	r.Read(b)
	for off := 0; off < size; off += 8192 {
		end := min(off+4096, size)
		clear(b[off:end])
	}
	return b
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func compressed(t testing.TB, data []byte, compression ota.Compression) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w io.WriteCloser
	var err error
	switch compression {
	case "none", "":
		return data
	case "gzip":
		w = gzip.NewWriter(&buf)
	case "zstd":
		w, err = zstd.NewWriter(&buf, zstd.WithEncoderLevel(zstd.SpeedFastest))
	case "xz":
		w, err = xz.NewWriter(&buf)
	default:
		t.Fatalf("unknown compression %q", compression)
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// makeSlot creates a slot file of size bytes filled with 0xA5, so that
// untouched regions can be told from written ones.
func makeSlot(t testing.TB, dir, name string, size int) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, bytes.Repeat([]byte{0xA5}, size), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// testTuning uses small buffers so that small images still cross many chunk,
// sync and readback boundaries.
func testTuning() tuning {
	t := defaultTuning()
	t.chunk = 64 << 10
	t.buffers = 3
	t.syncLag = 256 << 10
	t.readChunk = 128 << 10
	t.readBufs = 2
	t.progressEvery = time.Millisecond
	return t
}

// sleepRecorder is an injected Retry.Sleep that records and does not wait.
type sleepRecorder struct {
	mu     sync.Mutex
	delays []time.Duration
}

func (s *sleepRecorder) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.delays = append(s.delays, d)
	s.mu.Unlock()
	return ctx.Err()
}

func (s *sleepRecorder) got() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.delays...)
}

func fastRetry(rec *sleepRecorder) backoff.Policy {
	return backoff.Policy{Attempts: 3, Base: 10 * time.Millisecond, Max: 40 * time.Millisecond, Sleep: rec.sleep, Rand: func() float64 { return 0.5 }}
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkSlot asserts that the slot starts with want and is untouched after it.
func checkSlot(t testing.TB, path string, want []byte, slotSize int) {
	t.Helper()
	got := readFile(t, path)
	if len(got) != slotSize {
		t.Fatalf("slot %s is %d bytes, want %d (it must never be truncated or extended)", path, len(got), slotSize)
	}
	if !bytes.Equal(got[:len(want)], want) {
		t.Fatalf("slot %s does not hold the image", path)
	}
	if !bytes.Equal(got[len(want):], bytes.Repeat([]byte{0xA5}, slotSize-len(want))) {
		t.Fatalf("slot %s was written past the image end", path)
	}
}
