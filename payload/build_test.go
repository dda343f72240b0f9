package payload

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/otad/otad/ota"
)

// TestRoundTrip: Build, ParseIndex, then decoding every chunk from the store
// (CheckStore) gives the image back, and the result's figures describe what was written.
func TestRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name       string
		img        []byte
		opts       Options
		zero, raw  int64 // chunks of each kind, -1: do not check
		zstdChunks int64
	}{
		{"mixed 64KiB", testImage(1<<20, 64<<10, 1), Options{}, 5, 6, 5},
		{"short last chunk", testImage(1<<20+1234, 64<<10, 2), Options{}, 5, 6, 6},
		{"one byte", []byte{7}, Options{}, 0, 1, 0},
		{"one zero byte", []byte{0}, Options{}, 1, 0, 0},
		{"all zeros", make([]byte, 300<<10), Options{ChunkSize: 4 << 10}, 75, 0, 0},
		{"runs across chunks", testImage(1<<20, 10000, 3), Options{ChunkSize: 4 << 10}, -1, -1, -1},
		{"uncompressed store", testImage(1<<20, 64<<10, 4), Options{Compression: ota.CompressionNone}, 5, 11, 0},
		{"level 19, 1 MiB chunks, 5-byte tail stored raw", testImage(3<<20+5, 300<<10, 5), Options{ChunkSize: 1 << 20, Level: 19}, 0, 1, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := build(t, tc.img, tc.opts)
			r := b.res
			if r.ImageSize != int64(len(tc.img)) || r.ImageSHA256 != sha256.Sum256(tc.img) {
				t.Fatalf("image %d bytes %x, want %d bytes %x", r.ImageSize, r.ImageSHA256, len(tc.img), sha256.Sum256(tc.img))
			}
			if r.StoreSize != int64(len(b.store)) || r.IndexSHA256 != sha256.Sum256(r.Index) || int64(len(r.Index)) != IndexSize(r.ChunkCount) {
				t.Fatalf("store %d (wrote %d), index %d bytes for %d chunks", r.StoreSize, len(b.store), len(r.Index), r.ChunkCount)
			}
			if r.ChunkCount != ChunkCount(r.ImageSize, r.ChunkSize) || r.Zero+r.Raw+r.Zstd != r.ChunkCount {
				t.Fatalf("%d chunks (%d zero, %d raw, %d zstd) for %d bytes in chunks of %d", r.ChunkCount, r.Zero, r.Raw, r.Zstd, r.ImageSize, r.ChunkSize)
			}
			for _, k := range []struct {
				name      string
				got, want int64
			}{{"zero", r.Zero, tc.zero}, {"raw", r.Raw, tc.raw}, {"zstd", r.Zstd, tc.zstdChunks}} {
				if k.want >= 0 && k.got != k.want {
					t.Errorf("%s chunks: %d, want %d", k.name, k.got, k.want)
				}
			}
			var out bytes.Buffer
			if err := CheckStore(t.Context(), b.parse(t), bytes.NewReader(b.store), hex.EncodeToString(r.ImageSHA256[:]), &out); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out.Bytes(), tc.img) {
				t.Fatal("decoded chunks differ from the image")
			}
		})
	}
}

// TestBuildSameImageSameOutput: the index and store depend only on the image and
// options, so a re-signed image reuses what devices already hold.
func TestBuildSameImageSameOutput(t *testing.T) {
	img := testImage(512<<10, 20000, 9)
	a, b := build(t, img, Options{}), build(t, img, Options{})
	if !bytes.Equal(a.res.Index, b.res.Index) || !bytes.Equal(a.store, b.store) {
		t.Fatal("two builds of one image differ")
	}
}

func TestBuildRefuses(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	broken := errors.New("disk on fire")
	for _, tc := range []struct {
		name  string
		ctx   context.Context
		image io.Reader
		store io.Writer
		opts  Options
		want  string
	}{
		{"empty image", nil, strings.NewReader(""), io.Discard, Options{}, "empty"},
		{"chunk size not a power of two", nil, strings.NewReader("x"), io.Discard, Options{ChunkSize: 5000}, "chunk size 5000"},
		{"chunk size too small", nil, strings.NewReader("x"), io.Discard, Options{ChunkSize: 2048}, "chunk size 2048"},
		{"chunk size too large", nil, strings.NewReader("x"), io.Discard, Options{ChunkSize: 8 << 20}, "chunk size 8388608"},
		{"unknown compression", nil, strings.NewReader("x"), io.Discard, Options{Compression: "xz"}, `"xz"`},
		{"zstd-prefix of fixed chunks", nil, strings.NewReader("x"), io.Discard, Options{Compression: ota.CompressionZstdPrefix}, "needs chunking cdc"},
		{"cancelled", cancelled, strings.NewReader("x"), io.Discard, Options{}, "context canceled"},
		{"image read fails", nil, iotest.ErrReader(broken), io.Discard, Options{}, "disk on fire"},
		{"store write fails", nil, strings.NewReader("x"), errWriter{broken}, Options{}, "write chunk 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := tc.ctx
			if ctx == nil {
				ctx = t.Context()
			}
			_, err := Build(ctx, tc.image, tc.store, tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want an error mentioning %q, got %v", tc.want, err)
			}
		})
	}
}

type errWriter struct{ err error }

func (w errWriter) Write([]byte) (int, error) { return 0, w.err }
