package payload

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/bits"
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
	// compZstdPrefix: zstd frames decoded with the image's bytes before them
	// (version 2 only).
	compZstdPrefix byte = 2
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

// Index version 2 (docs/contract/chunked.md): content-defined chunks. The file is one zstd
// frame; decompressed, a 64-byte header and one 48-byte record per chunk or zero run, so
// that its size, HeaderSize2 + count*RecordSize2, follows from the manifest's count.
const (
	HeaderSize2 = 64
	RecordSize2 = 48

	version2 = 2
)

// The content-defined chunker's fixed parameters: chunk bounds follow from the
// average (chunks.size): at least a quarter of it, at most twice it. The
// polynomial is restic/chunker's Rabin fingerprint modulus, fixed so that a device
// cuts its booted slot exactly as the signer cut the image.
const (
	CDCPolynomial = 0x3DA3358B4DC173
	// ZeroBlock: zero runs are found in blocks of this size, aligned to the image's
	// start; a run of at least the chunks' minimum size is one zero record, of any
	// length, and is not cut into chunks.
	ZeroBlock = 4 << 10
)

// CDC is the chunking of a version 2 index: chunks of Min to Max bytes, cut where the
// Rabin fingerprint's low log2(Avg) bits are zero, past Min.
type CDC struct {
	Min, Avg, Max int64
	Pol           uint64
}

// CDCFor is the chunking a version 2 index of average chunk size avg (a valid chunk
// size) uses.
func CDCFor(avg int64) CDC {
	return CDC{Min: avg / 4, Avg: avg, Max: avg * 2, Pol: CDCPolynomial}
}

func (p CDC) avgBits() int { return bits.Len64(uint64(p.Avg)) - 2 }

// IndexSize2 is the uncompressed size of a version 2 index of count records, or -1
// when it would not fit in an int64.
func IndexSize2(count int64) int64 {
	if count < 0 || count > (1<<63-1-HeaderSize2)/RecordSize2 {
		return -1
	}
	return HeaderSize2 + count*RecordSize2
}

// maxCompressed bounds the compressed size of n bytes: zstd stores what does not
// compress in raw blocks of at most 128 KiB, 3 bytes of header each, after a frame
// header of at most 18 bytes.
func maxCompressed(n int64) int64 { return n + 3*(n/(128<<10)+1) + 18 }

type header2 struct {
	avg         uint32
	compression byte
	count       uint64
	imageSize   uint64
	min, max    uint32
	pol         uint64
	prefix      uint32 // zstd-prefix: the dictionary's bound; 0 is 2 × max (PrefixSize)
}

func (h header2) put(b []byte) {
	copy(b[0:7], magic)
	b[7] = version2
	binary.LittleEndian.PutUint32(b[8:12], h.avg)
	b[12] = h.compression
	clear(b[13:16])
	binary.LittleEndian.PutUint64(b[16:24], h.count)
	binary.LittleEndian.PutUint64(b[24:32], h.imageSize)
	binary.LittleEndian.PutUint32(b[32:36], h.min)
	binary.LittleEndian.PutUint32(b[36:40], h.max)
	binary.LittleEndian.PutUint64(b[40:48], h.pol)
	binary.LittleEndian.PutUint32(b[48:52], h.prefix)
	clear(b[52:64])
}

func getHeader2(b []byte) header2 {
	return header2{
		avg:         binary.LittleEndian.Uint32(b[8:12]),
		compression: b[12],
		count:       binary.LittleEndian.Uint64(b[16:24]),
		imageSize:   binary.LittleEndian.Uint64(b[24:32]),
		min:         binary.LittleEndian.Uint32(b[32:36]),
		max:         binary.LittleEndian.Uint32(b[36:40]),
		pol:         binary.LittleEndian.Uint64(b[40:48]),
		prefix:      binary.LittleEndian.Uint32(b[48:52]),
	}
}

// record2 is one version 2 record: a chunk, or a run of zeros of any length.
type record2 struct {
	sum    [sha256.Size]byte // zeros for a zero run
	length uint64            // bytes in the image
	stored uint32            // bytes in the store
	kind   Kind
}

func (r record2) put(b []byte) {
	copy(b[0:32], r.sum[:])
	binary.LittleEndian.PutUint64(b[32:40], r.length)
	binary.LittleEndian.PutUint32(b[40:44], r.stored)
	b[44] = byte(r.kind)
	clear(b[45:48])
}

func getRecord2(b []byte) record2 {
	var r record2
	copy(r.sum[:], b[0:32])
	r.length = binary.LittleEndian.Uint64(b[32:40])
	r.stored = binary.LittleEndian.Uint32(b[40:44])
	r.kind = Kind(b[44])
	return r
}
