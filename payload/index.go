package payload

import (
	"crypto/sha256"
	"fmt"
	"strings"

	"github.com/klauspost/compress/zstd"
	"github.com/otad/otad/ota"
)

// Index is a parsed, checked index. Chunk numbers run from 0 to Count()-1: with cdc,
// a zero run is one chunk.
type Index struct {
	version     int
	chunkSize   int64
	imageSize   int64
	storeSize   int64
	compression ota.Compression
	prefixSize  int64             // zstd-prefix: the most bytes of each chunk's dictionary
	data        []byte            // the whole index file; nil once released (ReleaseBytes)
	sum         [sha256.Size]byte // its SHA-256
	records     []byte            // the index after its header (decompressed with cdc)
	offsets     []int64           // store offset of each chunk
	imgOffsets  []int64           // image offset of each chunk (cdc; fixed chunks need none)
}

// Chunk is one index entry.
type Chunk struct {
	Num    int
	SHA256 [sha256.Size]byte // with cdc, zeros for a zero run
	Kind   Kind
	Offset int64 // in the image (and the slot)
	Length int   // uncompressed bytes: the chunk size, or less for the last chunk
	// StoreOffset and StoreLength locate the stored bytes; StoreLength is 0 for KindZero.
	StoreOffset int64
	StoreLength int
}

// Holds reports whether b, read from a slot where c lies, is c's bytes: zeros for a
// zero chunk, else bytes whose SHA-256 is c's.
func (c Chunk) Holds(b []byte) bool {
	if len(b) != c.Length {
		return false
	}
	if c.Kind == KindZero {
		return AllZero(b) || len(b) == 0
	}
	return sha256.Sum256(b) == c.SHA256
}

// ChunkSize is the size of every chunk but possibly the last (fixed chunking), or the
// average chunk size (cdc).
func (x *Index) ChunkSize() int64 { return x.chunkSize }

// MaxChunk is the largest chunk that is not a zero chunk: what one buffer must hold.
// A cdc zero run may be longer (up to MaxZeroRun); it is never held, only written.
func (x *Index) MaxChunk() int64 {
	if x.version == version2 {
		return CDCFor(x.chunkSize).Max
	}
	return x.chunkSize
}

// Chunking is the index's chunking: ota.ChunkingFixed or ota.ChunkingCDC.
func (x *Index) Chunking() ota.Chunking {
	if x.version == version2 {
		return ota.ChunkingCDC
	}
	return ota.ChunkingFixed
}

// ImageSize is the size of the image in bytes.
func (x *Index) ImageSize() int64 { return x.imageSize }

// StoreSize is the size of the store in bytes.
func (x *Index) StoreSize() int64 { return x.storeSize }

// Compression is the store's compression, ota.CompressionZstd, ota.CompressionZstdPrefix
// or ota.CompressionNone.
func (x *Index) Compression() ota.Compression { return x.compression }

// Bytes is the index file as parsed, nil after ReleaseBytes; the caller must not
// change it.
func (x *Index) Bytes() []byte { return x.data }

// SHA256 is the index file's SHA-256 (what payload.chunks.index_sha256 says).
func (x *Index) SHA256() [sha256.Size]byte { return x.sum }

// ReleaseBytes lets go of the index file where the records do not live in it (a
// version 2 index: they were decompressed out of it), so that a caller that keeps
// the file elsewhere does not hold it twice (a 1 GiB image's is 0.8 MB). Bytes is
// nil from then on.
func (x *Index) ReleaseBytes() {
	if x.version == version2 {
		x.data = nil
	}
}

// Count is the number of chunks.
func (x *Index) Count() int { return len(x.offsets) }

// Chunk returns chunk i; i must be in [0, Count()).
func (x *Index) Chunk(i int) Chunk {
	if x.version == version2 {
		return x.chunk2(i)
	}
	r := getRecord(x.records[i*RecordSize:])
	off := int64(i) * x.chunkSize
	return Chunk{
		Num: i, SHA256: r.sum, Kind: r.kind,
		Offset: off, Length: int(min(x.chunkSize, x.imageSize-off)),
		StoreOffset: x.offsets[i], StoreLength: int(r.length),
	}
}

func (x *Index) chunk2(i int) Chunk {
	r := getRecord2(x.records[i*RecordSize2:])
	return Chunk{
		Num: i, SHA256: r.sum, Kind: r.kind,
		Offset: x.imgOffsets[i], Length: int(r.length),
		StoreOffset: x.offsets[i], StoreLength: int(r.stored),
	}
}

// ParseIndex checks data, an index as downloaded, against the manifest's values and
// returns it parsed. In order: the manifest's values agree with each other; data has
// index_size bytes and sha256 index_sha256; every header field equals the manifest's;
// every record keeps the rules of docs/contract/chunked.md (kind known, length fitting
// the kind, zero chunks hashing as zeros, no compressed chunk in an uncompressed store);
// the stored lengths add up to store_size exactly. Every refusal is an *Error with code
// index_mismatch naming the field and, for a record, the chunk. The Index keeps data.
func ParseIndex(data []byte, want Expect) (*Index, error) {
	if err := want.Validate(); err != nil {
		return nil, err
	}
	if int64(len(data)) != want.IndexSize {
		return nil, indexErr("index", "%d bytes, payload.chunks.index_size says %d", len(data), want.IndexSize)
	}
	wantSum, _ := ota.ParseSHA256(want.IndexSHA256)
	if sum := sha256.Sum256(data); sum != wantSum {
		return nil, indexErr("index", "sha256 %x, payload.chunks.index_sha256 says %s", sum, strings.ToLower(want.IndexSHA256))
	}
	var x *Index
	var err error
	if want.cdc() {
		x, err = parseIndex2(data, want)
	} else {
		x, err = parseIndex1(data, want)
	}
	if err != nil {
		return nil, err
	}
	x.sum = wantSum
	return x, nil
}

// parseIndex1 checks the header and records of a version 1 index whose size and
// hash are checked.
func parseIndex1(data []byte, want Expect) (*Index, error) {
	if err := checkHeader(data[:HeaderSize], want, version); err != nil {
		return nil, err
	}
	x := newIndex(version, want, data, data[HeaderSize:])
	if err := x.checkRecords(); err != nil {
		return nil, err
	}
	return x, nil
}

// parseIndex2 decompresses a version 2 index whose size and hash are checked, into
// exactly IndexSize2(count) bytes and no more, and checks its header and records.
func parseIndex2(data []byte, want Expect) (*Index, error) {
	raw, err := decompressExact(data, IndexSize2(want.ChunkCount))
	if err != nil {
		return nil, indexErr("index", "%v", err)
	}
	return index2From(data, raw, want)
}

// index2From checks the header and records of raw, the version 2 index data
// decompressed to exactly IndexSize2(want.ChunkCount) bytes.
func index2From(data, raw []byte, want Expect) (*Index, error) {
	if err := checkHeader2(raw[:HeaderSize2], want); err != nil {
		return nil, err
	}
	x := newIndex(version2, want, data, raw[HeaderSize2:])
	if x.prefixed() {
		x.prefixSize = prefixFor(getHeader2(raw).prefix, x.MaxChunk())
	}
	if err := x.checkRecords2(); err != nil {
		return nil, err
	}
	return x, nil
}

// newIndex is the Index of data whose records (after the header, decompressed) are
// to be checked, with room for the offsets the check fills in.
func newIndex(v int, want Expect, data, records []byte) *Index {
	x := &Index{
		version:     v,
		chunkSize:   want.ChunkSize,
		imageSize:   want.ImageSize,
		storeSize:   want.StoreSize,
		compression: want.Compression,
		data:        data,
		records:     records,
		offsets:     make([]int64, want.ChunkCount),
	}
	if v == version2 {
		x.imgOffsets = make([]int64, want.ChunkCount)
	}
	return x
}

// decompressExact decodes data, zstd frames, into exactly n bytes: a frame that
// declares or produces more is refused without decoding further, and nothing larger
// than n is allocated.
func decompressExact(data []byte, n int64) ([]byte, error) {
	out, err := decompressUpTo(data, n)
	if err != nil {
		return nil, err
	}
	if int64(len(out)) != n {
		return nil, fmt.Errorf("decompresses to %d bytes, want %d", len(out), n)
	}
	return out, nil
}

// decompressUpTo decodes data, zstd frames, into at most n bytes: more is an error.
func decompressUpTo(data []byte, n int64) ([]byte, error) {
	zd, err := zstd.NewReader(nil,
		zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxMemory(uint64(max(n+decodeSlack, zstd.MinWindowSize))),
		zstd.WithDecoderMaxWindow(uint64(max(n, zstd.MinWindowSize))),
		zstd.WithDecodeAllCapLimit(true))
	if err != nil {
		return nil, fmt.Errorf("zstd decoder: %w", err)
	}
	defer zd.Close()
	out, err := zd.DecodeAll(data, make([]byte, 0, n+decodeSlack))
	if err != nil {
		return nil, fmt.Errorf("decompress: %w", err)
	}
	if int64(len(out)) > n {
		return nil, fmt.Errorf("decompresses to more than %d bytes", n)
	}
	return out, nil
}
