package payload

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"runtime"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/otad/otad/ota"
)

const decCS = 4096

// text is compressible content of n bytes.
func text(n int, seed byte) []byte {
	b := bytes.Repeat([]byte("chunk of an otad image "+string(rune('a'+seed))), n/23+1)
	return b[:n]
}

func encodeAll(t testing.TB, b []byte, opts ...zstd.EOption) []byte {
	t.Helper()
	enc, err := zstd.NewWriter(nil, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	return enc.EncodeAll(b, nil)
}

// encodeStream writes b as a frame that does not declare its size.
func encodeStream(t testing.TB, b []byte, opts ...zstd.EOption) []byte {
	t.Helper()
	var out bytes.Buffer
	enc, err := zstd.NewWriter(&out, opts...)
	if err != nil {
		t.Fatal(err)
	}
	enc.Write(b)
	enc.Close()
	return out.Bytes()
}

// smallWindow makes frames whose window fits a chunk, so what stops them decoding past
// it is the output bound, not the window bound.
var smallWindow = []zstd.EOption{zstd.WithWindowSize(decCS), zstd.WithSingleSegment(false)}

// hugeFrame is a frame header declaring 1 GiB of content, then one RLE block.
func hugeFrame() []byte {
	f := []byte{0x28, 0xb5, 0x2f, 0xfd, 0xe0} // magic; 8-byte size, single segment
	f = binary.LittleEndian.AppendUint64(f, 1<<30)
	const size = 128<<10 - 1 // last RLE block of 128 KiB - 1 bytes
	hdr := uint32(1) | 1<<1 | size<<3
	return append(f, byte(hdr), byte(hdr>>8), byte(hdr>>16), 0)
}

// oneChunk makes a decoder for an index of one chunk whose bytes are content, stored
// in storedLen bytes of the given kind.
func oneChunk(t testing.TB, content []byte, kind Kind, storedLen int) *Decoder {
	t.Helper()
	return decoderFor(t, decCS, int64(len(content)), []record{{sum: sha256.Sum256(content), length: uint32(storedLen), kind: kind}})
}

// decoderFor makes a decoder for a hand-made zstd index, closed when the test ends.
func decoderFor(t testing.TB, chunkSize, imageSize int64, recs []record) *Decoder {
	t.Helper()
	x, err := ParseIndex(makeIndex(chunkSize, imageSize, ota.CompressionZstd, recs))
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewDecoder(x)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

func TestDecodeChunk(t *testing.T) {
	content := text(decCS, 0)
	good := encodeAll(t, content)
	altered := bytes.Clone(good)
	altered[len(altered)/2] ^= 0x40
	other := encodeAll(t, text(decCS, 1))
	rawAltered := bytes.Clone(content)
	rawAltered[100] ^= 1
	for _, tc := range []struct {
		name    string
		content []byte // what the index says the chunk is
		kind    Kind
		stored  []byte
		recLen  int      // the record's length when not len(stored)
		want    []string // nil: accepted
	}{
		{"zstd chunk", content, KindZstd, good, 0, nil},
		{"short last chunk", content[:1000], KindZstd, encodeAll(t, content[:1000]), 0, nil},
		{"frame without a declared size", content, KindZstd, encodeStream(t, content), 0, nil},
		{"raw chunk", content, KindRaw, content, 0, nil},
		{"altered frame", content, KindZstd, altered, 0, []string{"store.chunk[0]"}},
		{"another chunk's frame", content, KindZstd, other, 0, []string{"store.chunk[0]", "sha256"}},
		{"altered raw chunk", content, KindRaw, rawAltered, 0, []string{"store.chunk[0]", "sha256"}},
		{"fewer stored bytes than the index says", content, KindZstd, good[:len(good)-1], len(good), []string{"store.chunk[0]", "stored bytes"}},
		{"decodes to fewer bytes", content, KindZstd, encodeAll(t, content[:4000]), 0, []string{"decompresses to 4000 bytes, want 4096"}},
		{"declares more than the chunk", content, KindZstd, encodeAll(t, text(2*decCS, 0)), 0, []string{"store.chunk[0]", "decompress"}},
		{"more than the last chunk", content[:1000], KindZstd, encodeAll(t, content[:1001]), 0, []string{"store.chunk[0]", "decompress"}},
		{"undeclared, one byte more than the chunk", content, KindZstd, encodeStream(t, text(decCS+1, 0), smallWindow...), 0, []string{"store.chunk[0]", "decompress"}},
		{"undeclared, far more than the chunk", content, KindZstd, encodeStream(t, make([]byte, 1<<20), smallWindow...), 0, []string{"store.chunk[0]", "decompress"}},
		{"window larger than the chunk", content, KindZstd, encodeStream(t, content, zstd.WithWindowSize(1<<20), zstd.WithSingleSegment(false)), 0, []string{"store.chunk[0]"}},
		{"declares 1 GiB", content, KindZstd, hugeFrame(), 0, []string{"store.chunk[0]", "decompress"}},
		{"not zstd", content, KindZstd, content[:100], 0, []string{"store.chunk[0]", "decompress"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := tc.recLen
			if n == 0 {
				n = len(tc.stored)
			}
			d := oneChunk(t, tc.content, tc.kind, n)
			got, err := d.Decode(0, tc.stored)
			if tc.want == nil {
				if err != nil || !bytes.Equal(got, tc.content) {
					t.Fatalf("got %d bytes, %v", len(got), err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted %d bytes", len(got))
			}
			wantErr(t, err, ota.CodeChunkMismatch, tc.want...)
		})
	}
}

// TestDecodeHostileFrameAllocatesLittle: a frame declaring 1 GiB, or decoding a 1 MiB
// run without declaring it, is refused without allocating anything like its size.
func TestDecodeHostileFrameAllocatesLittle(t *testing.T) {
	content := text(decCS, 0)
	for name, stored := range map[string][]byte{
		"declares 1 GiB":                 hugeFrame(),
		"undeclared 1 MiB, small window": encodeStream(t, make([]byte, 1<<20), smallWindow...),
		"undeclared 1 MiB, 8 MiB window": encodeStream(t, make([]byte, 1<<20), zstd.WithWindowSize(8<<20), zstd.WithSingleSegment(false)),
	} {
		t.Run(name, func(t *testing.T) {
			d := oneChunk(t, content, KindZstd, len(stored))
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := d.Decode(0, stored)
			runtime.ReadMemStats(&after)
			wantErr(t, err, ota.CodeChunkMismatch, "store.chunk[0]")
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
				t.Fatalf("refusing it allocated %d bytes", grew)
			}
		})
	}
}

// TestDecodeZeroChunkAfterOthers: a zero chunk comes out as zeros even when the
// decoder's buffer held another chunk just before.
func TestDecodeZeroChunkAfterOthers(t *testing.T) {
	content := text(decCS, 0)
	frame := encodeAll(t, content)
	d := decoderFor(t, decCS, 2*decCS, []record{
		{sum: sha256.Sum256(content), length: uint32(len(frame)), kind: KindZstd},
		{sum: zeroSum(decCS), kind: KindZero},
	})
	if _, err := d.Decode(0, frame); err != nil {
		t.Fatal(err)
	}
	got, err := d.Decode(1, nil)
	if err != nil || !bytes.Equal(got, make([]byte, decCS)) {
		t.Fatalf("zero chunk: %d bytes, %v", len(got), err)
	}
	if _, err := d.Decode(1, []byte{0}); err == nil {
		t.Fatal("a zero chunk with stored bytes was accepted")
	}
}
