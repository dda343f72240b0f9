package payload

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"

	"github.com/otad/otad/ota"
)

// MaxZeroRun is the longest zero run one version 2 record describes: a chunk's
// length fits an int on 32-bit devices, and a longer run is several records.
const MaxZeroRun = 1 << 30

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
	switch w.Compression {
	case ota.CompressionZstd:
		wantComp = compZstd
	case ota.CompressionZstdPrefix:
		wantComp = compZstdPrefix
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
	case !bytes.Equal(b[52:64], make([]byte, 12)):
		return bad("reserved", "bytes 52-63 are % x, want zeros", b[52:64])
	case w.Compression != ota.CompressionZstdPrefix && h.prefix != 0:
		return bad("prefix_size", "%d in a store of compression %s, want 0", h.prefix, w.Compression)
	case w.Compression == ota.CompressionZstdPrefix && prefixFor(h.prefix, p.Max) < 0:
		return bad("prefix_size", "%d, want 0 or a power of two from %d to %d", h.prefix, 2*p.Max, int64(MaxPrefixSize))
	case int64(h.min) != p.Min || int64(h.max) != p.Max:
		return bad("min_size", "chunks of %d to %d bytes, want %d to %d for an average of %d", h.min, h.max, p.Min, p.Max, p.Avg)
	case h.pol != p.Pol:
		return bad("polynomial", "%#x, want %#x", h.pol, p.Pol)
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
			if x.compression != ota.CompressionZstd && !x.prefixed() {
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
			if x.compression != ota.CompressionZstd && !x.prefixed() {
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
