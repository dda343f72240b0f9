package payload

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
)

// The index layout (docs/contract/chunked.md): a 32-byte header, then one 36-byte record
// per chunk, all little-endian, nothing else. Fixed sizes make
// index_size = HeaderSize + count*RecordSize exact, so the manifest can pin it.
const (
	HeaderSize = 32
	RecordSize = 36

	magic   = "OTADIDX"
	version = 1
)

// Chunk size bounds (docs/contract/chunked.md): a power of two from 4 KiB to 4 MiB.
const (
	MinChunkSize     = 4 << 10
	MaxChunkSize     = 4 << 20
	DefaultChunkSize = 64 << 10
)

// MaxIndexSize is the largest index a device holds in memory (slots refuses a larger
// index_size with index_mismatch, and otactl sign refuses to write one): 8 MiB lists
// 233016 chunks, a 14 GiB image in 64 KiB chunks.
const MaxIndexSize = 8 << 20

// compression codes in the header.
const (
	compNone byte = 0
	compZstd byte = 1
)

// Kind says how one chunk is kept in the store.
type Kind uint8

// Chunk kinds (byte 35 of a record).
const (
	KindZstd Kind = 0 // one zstd frame, shorter than the chunk
	KindRaw  Kind = 1 // the chunk's bytes as they are: compression did not help
	KindZero Kind = 2 // all zeros, not stored (length 0)
)

func (k Kind) String() string {
	return enumName([]string{KindZstd: "zstd", KindRaw: "raw", KindZero: "zero"}, k, "kind")
}

// enumName is names[v], or what(v) for a value without a name.
func enumName[T ~uint8](names []string, v T, what string) string {
	if int(v) < len(names) {
		return names[v]
	}
	return fmt.Sprintf("%s(%d)", what, uint8(v))
}

// maxStoredLen is the largest length a record's 24-bit field holds; MaxChunkSize fits.
const maxStoredLen = 1<<24 - 1

type header struct {
	chunkSize   uint32
	compression byte
	count       uint64
	imageSize   uint64
}

func (h header) put(b []byte) {
	copy(b[0:7], magic)
	b[7] = version
	binary.LittleEndian.PutUint32(b[8:12], h.chunkSize)
	b[12] = h.compression
	clear(b[13:16])
	binary.LittleEndian.PutUint64(b[16:24], h.count)
	binary.LittleEndian.PutUint64(b[24:32], h.imageSize)
}

// record is one chunk's entry as stored.
type record struct {
	sum    [sha256.Size]byte
	length uint32 // 24 bits
	kind   Kind
}

func (r record) put(b []byte) {
	copy(b[0:32], r.sum[:])
	b[32] = byte(r.length)
	b[33] = byte(r.length >> 8)
	b[34] = byte(r.length >> 16)
	b[35] = byte(r.kind)
}

func getRecord(b []byte) record {
	var r record
	copy(r.sum[:], b[0:32])
	r.length = uint32(b[32]) | uint32(b[33])<<8 | uint32(b[34])<<16
	r.kind = Kind(b[35])
	return r
}

// IndexSize is the exact size of an index of count chunks, or -1 when it would not fit
// in an int64.
func IndexSize(count int64) int64 {
	if count < 0 || count > (1<<63-1-HeaderSize)/RecordSize {
		return -1
	}
	return HeaderSize + count*RecordSize
}

// ChunkCount is ceil(imageSize/chunkSize) without overflow; both must be positive.
func ChunkCount(imageSize, chunkSize int64) int64 {
	return imageSize/chunkSize + min(imageSize%chunkSize, 1)
}

// ValidChunkSize reports whether n is a power of two from MinChunkSize to MaxChunkSize.
func ValidChunkSize(n int64) bool {
	return n >= MinChunkSize && n <= MaxChunkSize && n&(n-1) == 0
}
