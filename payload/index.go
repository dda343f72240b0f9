package payload

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/otad/otad/ota"
)

// Expect is what the signed manifest says about the index and store (its payload.size
// and payload.chunks fields, docs/contract/chunked.md).
type Expect struct {
	// ChunkSize is every chunk's size (fixed chunking) or their average (cdc).
	ChunkSize int64
	// ChunkCount is the number of records: of chunks, and with cdc of zero runs.
	ChunkCount int64
	ImageSize  int64
	// IndexSize and IndexSHA256 are the index file's as fetched (compressed with cdc).
	IndexSize   int64
	IndexSHA256 string // 64 hex digits
	StoreSize   int64
	Compression ota.Compression // zstd, or none: every chunk stored raw
	Chunking    ota.Chunking    // fixed (index version 1, also for "") or cdc (version 2)
}

// cdc reports whether w describes a version 2 index.
func (w Expect) cdc() bool { return w.Chunking == ota.ChunkingCDC }

// Index is a parsed, checked index. Chunk numbers run from 0 to Count()-1: with cdc,
// a zero run is one chunk.
type Index struct {
	version     int
	chunkSize   int64
	imageSize   int64
	storeSize   int64
	compression ota.Compression
	data        []byte  // the whole index file
	records     []byte  // the index after its header (decompressed with cdc)
	offsets     []int64 // store offset of each chunk
	imgOffsets  []int64 // image offset of each chunk (cdc; fixed chunks need none)
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

// Compression is the store's compression, ota.CompressionZstd or ota.CompressionNone.
func (x *Index) Compression() ota.Compression { return x.compression }

// Bytes is the index file as parsed; the caller must not change it.
func (x *Index) Bytes() []byte { return x.data }

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
	if want.cdc() {
		return parseIndex2(data, want)
	}
	if err := checkHeader(data[:HeaderSize], want, version); err != nil {
		return nil, err
	}
	x := newIndex(version, want, data, data[HeaderSize:])
	if err := x.checkRecords(); err != nil {
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

// Validate refuses manifest values that contradict each other or the format, with an
// index_mismatch *Error whose Field is the manifest's JSON path (payload.chunks.size,
// ...). ParseIndex runs it first, so that nothing after it can overflow:
// count*RecordSize fits (IndexSize), and so do chunk offsets (count*chunkSize <
// imageSize+chunkSize). A manifest parser runs it too, to refuse such a manifest early.
func (w Expect) Validate() error {
	bad := indexErr
	switch w.Chunking {
	case "", ota.ChunkingFixed:
	case ota.ChunkingCDC:
	default:
		return bad("payload.chunks.chunking", "want fixed or cdc, got %q", truncate(string(w.Chunking)))
	}
	switch {
	case !ValidChunkSize(w.ChunkSize):
		return bad("payload.chunks.size", "%d is not a power of two from %d to %d", w.ChunkSize, MinChunkSize, MaxChunkSize)
	case w.ImageSize <= 0:
		return bad("payload.size", "%d is not positive", w.ImageSize)
	}
	// The count and the index size follow the version's layout; the rest is common.
	count := w.validateCount1
	if w.cdc() {
		count = w.validateCount2
	}
	if err := count(); err != nil {
		return err
	}
	switch {
	case w.StoreSize < 0:
		return bad("payload.chunks.store_size", "%d is negative", w.StoreSize)
	case w.Compression != ota.CompressionZstd && w.Compression != ota.CompressionNone:
		return bad("payload.chunks.compression", "want zstd or none, got %q", truncate(string(w.Compression)))
	}
	if _, ok := ota.ParseSHA256(w.IndexSHA256); !ok {
		return bad("payload.chunks.index_sha256", "want 64 hex digits")
	}
	return nil
}

// validateCount1 is Validate's rule for fixed chunks: ceil(size / chunks.size)
// chunks, and an index of exactly their records.
func (w Expect) validateCount1() error {
	switch {
	case w.ChunkCount != ChunkCount(w.ImageSize, w.ChunkSize):
		return indexErr("payload.chunks.count", "%d, but size %d in chunks of %d makes %d", w.ChunkCount, w.ImageSize, w.ChunkSize, ChunkCount(w.ImageSize, w.ChunkSize))
	case w.IndexSize != IndexSize(w.ChunkCount):
		return indexErr("payload.chunks.index_size", "%d, but %d chunks make an index of %d bytes", w.IndexSize, w.ChunkCount, IndexSize(w.ChunkCount))
	}
	return nil
}

// checkHeader checks the first 32 bytes of a header of version v against the manifest:
// every version lays them out alike.
func checkHeader(b []byte, w Expect, v byte) error {
	h := header{
		chunkSize:   binary.LittleEndian.Uint32(b[8:12]),
		compression: b[12],
		count:       binary.LittleEndian.Uint64(b[16:24]),
		imageSize:   binary.LittleEndian.Uint64(b[24:32]),
	}
	bad := func(field, format string, args ...any) error {
		return indexErr("index.header."+field, format, args...)
	}
	wantComp := compNone
	if w.Compression == ota.CompressionZstd {
		wantComp = compZstd
	}
	switch {
	case string(b[0:7]) != magic:
		return bad("magic", "want %q, got %q", magic, b[0:7])
	case b[7] != v:
		return bad("version", "want %d, got %d", v, b[7])
	case uint64(h.chunkSize) != uint64(w.ChunkSize):
		return bad("chunk_size", "%d, manifest says %d", h.chunkSize, w.ChunkSize)
	case h.compression != wantComp:
		return bad("compression", "code %d, manifest says %s (code %d)", h.compression, w.Compression, wantComp)
	case b[13] != 0 || b[14] != 0 || b[15] != 0:
		return bad("reserved", "bytes 13-15 are % x, want zeros", b[13:16])
	case h.count != uint64(w.ChunkCount):
		return bad("chunk_count", "%d, manifest says %d", h.count, w.ChunkCount)
	case h.imageSize != uint64(w.ImageSize):
		return bad("image_size", "%d, manifest says %d", h.imageSize, w.ImageSize)
	}
	return nil
}

// checkRecords walks the records once, filling in the store offsets. Offsets are not
// stored: the store is the stored chunks back to back in chunk order, so an index
// cannot describe overlapping, out-of-order or gapped ranges at all.
func (x *Index) checkRecords() error {
	var zeroFull, zeroLast *[sha256.Size]byte
	var off int64
	for i := range x.offsets {
		r := getRecord(x.records[i*RecordSize:])
		n := min(x.chunkSize, x.imageSize-int64(i)*x.chunkSize)
		bad := func(field, format string, args ...any) error {
			return indexErr(fmt.Sprintf("index.chunk[%d].%s", i, field), format, args...)
		}
		switch r.kind {
		case KindZero:
			if r.length != 0 {
				return bad("length", "zero chunk with stored length %d, want 0", r.length)
			}
			zs := &zeroFull
			if n != x.chunkSize {
				zs = &zeroLast
			}
			if *zs == nil {
				s := zeroSum(n)
				*zs = &s
			}
			if r.sum != **zs {
				return bad("sha256", "zero chunk whose sha256 %x is not that of %d zero bytes", r.sum, n)
			}
		case KindRaw:
			if int64(r.length) != n {
				return bad("length", "raw chunk with stored length %d, want its size %d", r.length, n)
			}
		case KindZstd:
			if x.compression != ota.CompressionZstd {
				return bad("kind", "zstd chunk in a store with compression %s", x.compression)
			}
			if r.length == 0 || int64(r.length) >= n {
				return bad("length", "zstd chunk with stored length %d, want 1 to %d (less than its size, else it is stored raw)", r.length, n-1)
			}
		default:
			return bad("kind", "unknown kind %d", uint8(r.kind))
		}
		// off <= storeSize holds here, so the subtraction cannot overflow.
		if int64(r.length) > x.storeSize-off {
			return bad("length", "stored bytes %d+%d run past store_size %d", off, r.length, x.storeSize)
		}
		x.offsets[i] = off
		off += int64(r.length)
	}
	if off != x.storeSize {
		return indexErr("payload.chunks.store_size", "%d, but the chunks store %d bytes", x.storeSize, off)
	}
	return nil
}

// zeroSum is the SHA-256 of n zero bytes, hashed from a small buffer.
func zeroSum(n int64) [sha256.Size]byte {
	var z [4096]byte
	h := sha256.New()
	for ; n > 0; n -= int64(len(z)) {
		h.Write(z[:min(n, int64(len(z)))])
	}
	var s [sha256.Size]byte
	h.Sum(s[:0])
	return s
}

// truncate keeps hostile values from flooding logs.
func truncate(s string) string {
	const max = 40
	if len(s) <= max {
		return s
	}
	return s[:max] + "…"
}
