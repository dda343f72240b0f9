package payload

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/otad/otad/ota"
)

// testImage is size bytes of the three kinds of content an image has, in runs of
// run bytes: incompressible, compressible and zero.
func testImage(size, run int, seed uint64) []byte {
	rng := rand.New(rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)}))
	img := make([]byte, size)
	for off, k := 0, 0; off < size; off, k = off+run, k+1 {
		part := img[off:min(off+run, size)]
		switch k % 3 {
		case 0:
			for i := range part {
				part[i] = byte(rng.Uint32())
			}
		case 1:
			copy(part, bytes.Repeat([]byte("otad chunked payload "+string(rune('a'+k%26))), len(part)/21+1))
		}
	}
	return img
}

// built is one Build's outputs.
type built struct {
	res   *Result
	store []byte
}

func build(t testing.TB, img []byte, opts Options) built {
	t.Helper()
	var store bytes.Buffer
	res, err := Build(t.Context(), bytes.NewReader(img), &store, opts)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return built{res: res, store: store.Bytes()}
}

func (b built) parse(t testing.TB) *Index {
	t.Helper()
	x, err := ParseIndex(b.res.Index, b.res.Expect())
	if err != nil {
		t.Fatalf("ParseIndex of a built index: %v", err)
	}
	return x
}

// makeIndex writes an index by hand, so tests can say things Build never would. The
// Expect matches it, with the store size the sum of the records' lengths.
func makeIndex(chunkSize, imageSize int64, comp ota.Compression, recs []record) ([]byte, Expect) {
	h := header{chunkSize: uint32(chunkSize), count: uint64(len(recs)), imageSize: uint64(imageSize)}
	if comp == ota.CompressionZstd {
		h.compression = compZstd
	}
	data := make([]byte, HeaderSize+len(recs)*RecordSize)
	h.put(data)
	var store int64
	for i, r := range recs {
		r.put(data[HeaderSize+i*RecordSize:])
		store += int64(r.length)
	}
	return data, expectFor(data, Expect{ChunkSize: chunkSize, ChunkCount: int64(len(recs)), ImageSize: imageSize, StoreSize: store, Compression: comp})
}

// expectFor fills in the index's size and sha256 from data.
func expectFor(data []byte, e Expect) Expect {
	sum := sha256.Sum256(data)
	e.IndexSize, e.IndexSHA256 = int64(len(data)), hex.EncodeToString(sum[:])
	return e
}

// wantErr checks that err is an *Error with code and a message containing every part.
func wantErr(t *testing.T, err error, code ota.Code, parts ...string) {
	t.Helper()
	var e *ota.Error
	if !errors.As(err, &e) || e.Code != code {
		t.Fatalf("want a %s *ota.Error, got %v", code, err)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not mention %q", err, p)
		}
	}
}

func asErr(err error, e **ota.Error) bool { return errors.As(err, e) }
