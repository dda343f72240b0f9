package payload

import (
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
	Compression ota.Compression // zstd, zstd-prefix (cdc only), or none: every chunk stored raw
	Chunking    ota.Chunking    // fixed (index version 1, also for "") or cdc (version 2)
}

// cdc reports whether w describes a version 2 index.
func (w Expect) cdc() bool { return w.Chunking == ota.ChunkingCDC }

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
	case w.Compression == ota.CompressionZstdPrefix && !w.cdc():
		return bad("payload.chunks.compression", "zstd-prefix needs chunking cdc")
	case w.Compression != ota.CompressionZstd && w.Compression != ota.CompressionNone && w.Compression != ota.CompressionZstdPrefix:
		return bad("payload.chunks.compression", "want zstd, zstd-prefix or none, got %q", truncate(string(w.Compression)))
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

// validateCount2 is Validate's rule for cdc: chunks.count records (1 to one a byte)
// make an index of IndexSize2(count) bytes, which must fit MaxIndexSize (a device
// holds it in memory), and the file as fetched is that, compressed.
func (w Expect) validateCount2() error {
	raw := IndexSize2(w.ChunkCount)
	switch {
	case w.ChunkCount < 1 || w.ChunkCount > w.ImageSize:
		return indexErr("payload.chunks.count", "%d records for %d bytes: want 1 to one a byte", w.ChunkCount, w.ImageSize)
	case raw < 0 || raw > MaxIndexSize:
		return indexErr("payload.chunks.count", "%d records make an index of more than the %d bytes a device holds", w.ChunkCount, MaxIndexSize)
	case w.IndexSize < 1 || w.IndexSize > maxCompressed(raw):
		return indexErr("payload.chunks.index_size", "%d, but %d records compress to 1 to %d bytes", w.IndexSize, w.ChunkCount, maxCompressed(raw))
	}
	return nil
}

// truncate keeps hostile values from flooding logs.
func truncate(s string) string {
	const max = 40
	if len(s) <= max {
		return s
	}
	return s[:max] + "…"
}
