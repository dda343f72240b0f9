package payload

import (
	"bytes"
	"fmt"

	"github.com/klauspost/compress/zstd"
	"github.com/otad/otad/ota"
)

// MaxZeroRun is the longest zero run one version 2 record describes: a chunk's
// length fits an int on 32-bit devices, and a longer run is several records.
const MaxZeroRun = 1 << 30

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

// parseIndex2 decompresses a version 2 index whose size and hash are checked, into
// exactly IndexSize2(count) bytes and no more, and checks its header and records.
func parseIndex2(data []byte, want Expect) (*Index, error) {
	raw, err := decompressExact(data, IndexSize2(want.ChunkCount))
	if err != nil {
		return nil, indexErr("index", "%v", err)
	}
	if err := checkHeader2(raw[:HeaderSize2], want); err != nil {
		return nil, err
	}
	x := newIndex(version2, want, data, raw[HeaderSize2:])
	if err := x.checkRecords2(); err != nil {
		return nil, err
	}
	return x, nil
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

// checkHeader2 checks a version 2 header: its first 32 bytes as version 1's, then
// the cut's parameters.
func checkHeader2(b []byte, w Expect) error {
	if err := checkHeader(b, w, version2); err != nil {
		return err
	}
	h := getHeader2(b)
	p := CDCFor(w.ChunkSize)
	bad := func(field, format string, args ...any) error {
		return indexErr("index.header."+field, format, args...)
	}
	switch {
	case !bytes.Equal(b[48:64], make([]byte, 16)):
		return bad("reserved", "bytes 48-63 are % x, want zeros", b[48:64])
	case int64(h.min) != p.Min || int64(h.max) != p.Max:
		return bad("min_size", "chunks of %d to %d bytes, want %d to %d for an average of %d", h.min, h.max, p.Min, p.Max, p.Avg)
	case h.pol != p.Pol:
		return bad("polynomial", "%#x, want %#x", h.pol, p.Pol)
	}
	return nil
}

// checkRecords2 walks the records once, filling in the image and store offsets: both
// are implied by the order, so no two chunks can overlap or leave a gap.
func (x *Index) checkRecords2() error {
	maxLen := uint64(CDCFor(x.chunkSize).Max)
	var off, img int64
	for i := range x.offsets {
		b := x.records[i*RecordSize2 : (i+1)*RecordSize2]
		r := getRecord2(b)
		bad := func(field, format string, args ...any) error {
			return indexErr(fmt.Sprintf("index.chunk[%d].%s", i, field), format, args...)
		}
		if b[45] != 0 || b[46] != 0 || b[47] != 0 {
			return bad("reserved", "bytes 45-47 are % x, want zeros", b[45:48])
		}
		if r.length == 0 || r.length > uint64(x.imageSize-img) {
			return bad("length", "%d bytes at image offset %d: want 1 to the %d left of the image", r.length, img, x.imageSize-img)
		}
		switch r.kind {
		case KindZero:
			if r.stored != 0 {
				return bad("stored_length", "zero run with stored length %d, want 0", r.stored)
			}
			if r.sum != ([32]byte{}) {
				return bad("sha256", "zero run whose sha256 field is not zeros")
			}
			if r.length > MaxZeroRun {
				return bad("length", "zero run of %d bytes, more than %d", r.length, MaxZeroRun)
			}
		case KindRaw:
			if r.length > maxLen || uint64(r.stored) != r.length {
				return bad("stored_length", "raw chunk of %d bytes stored in %d: want its length, at most %d", r.length, r.stored, maxLen)
			}
		case KindZstd:
			if x.compression != ota.CompressionZstd {
				return bad("kind", "zstd chunk in a store with compression %s", x.compression)
			}
			if r.length > maxLen || r.stored == 0 || uint64(r.stored) >= r.length {
				return bad("stored_length", "zstd chunk of %d bytes stored in %d: want at most %d bytes stored in fewer", r.length, r.stored, maxLen)
			}
		default:
			return bad("kind", "unknown kind %d", uint8(r.kind))
		}
		if int64(r.stored) > x.storeSize-off {
			return bad("stored_length", "stored bytes %d+%d run past store_size %d", off, r.stored, x.storeSize)
		}
		x.offsets[i], x.imgOffsets[i] = off, img
		off += int64(r.stored)
		img += int64(r.length)
	}
	if img != x.imageSize {
		return indexErr("payload.size", "%d, but the chunks make %d bytes", x.imageSize, img)
	}
	if off != x.storeSize {
		return indexErr("payload.chunks.store_size", "%d, but the chunks store %d bytes", x.storeSize, off)
	}
	return nil
}

func (x *Index) chunk2(i int) Chunk {
	r := getRecord2(x.records[i*RecordSize2:])
	return Chunk{
		Num: i, SHA256: r.sum, Kind: r.kind,
		Offset: x.imgOffsets[i], Length: int(r.length),
		StoreOffset: x.offsets[i], StoreLength: int(r.stored),
	}
}
