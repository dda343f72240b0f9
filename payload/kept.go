package payload

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"

	"github.com/klauspost/compress/zstd"

	"github.com/otad/otad/ota"
)

// zstdMagic begins every zstd frame: a version 2 index as fetched.
var zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}

// ParseKept parses an index a device kept from an earlier install, with no manifest at
// hand: the values ParseIndex checks against are taken from the index itself (its
// header, its size, its hash, the sum of its lengths), and everything else is checked
// as ParseIndex does, so a damaged file is refused rather than misread. What it
// describes is no more trusted than the file: a caller checks every chunk it takes
// on the strength of it. Both versions are read: a version 2 index is kept compressed,
// as it was fetched.
func ParseKept(data []byte) (*Index, error) {
	if bytes.HasPrefix(data, zstdMagic) {
		return parseKept2(data)
	}
	if len(data) < HeaderSize {
		return nil, indexErr("index", "%d bytes, shorter than a header", len(data))
	}
	w := Expect{
		ChunkSize:   int64(binary.LittleEndian.Uint32(data[8:12])),
		ChunkCount:  int64(min(binary.LittleEndian.Uint64(data[16:24]), 1<<62)),
		ImageSize:   int64(min(binary.LittleEndian.Uint64(data[24:32]), 1<<62)),
		IndexSize:   int64(len(data)),
		Compression: ota.CompressionNone,
	}
	switch data[12] {
	case compZstd:
		w.Compression = ota.CompressionZstd
	case compZstdPrefix:
		w.Compression = ota.CompressionZstdPrefix
	}
	sum := sha256.Sum256(data)
	w.IndexSHA256 = hex.EncodeToString(sum[:])
	// The lengths are 24 bits, so their sum fits whatever the count.
	for r := data[HeaderSize:]; len(r) >= RecordSize; r = r[RecordSize:] {
		w.StoreSize += int64(getRecord(r).length)
	}
	return ParseIndex(data, w)
}

// parseKept2 reads the values of a version 2 index from its decompressed header and
// records (at most MaxIndexSize bytes of them), then parses it as ParseIndex does.
func parseKept2(data []byte) (*Index, error) {
	raw, err := decompressUpTo(data, keptSize(data))
	if err != nil {
		return nil, indexErr("index", "%v", err)
	}
	if len(raw) < HeaderSize2 {
		return nil, indexErr("index", "%d bytes decompressed, shorter than a header", len(raw))
	}
	h := getHeader2(raw)
	w := Expect{
		ChunkSize:   int64(h.avg),
		ChunkCount:  int64(min(h.count, 1<<62)),
		ImageSize:   int64(min(h.imageSize, 1<<62)),
		IndexSize:   int64(len(data)),
		Compression: ota.CompressionNone,
		Chunking:    ota.ChunkingCDC,
	}
	switch h.compression {
	case compZstd:
		w.Compression = ota.CompressionZstd
	case compZstdPrefix:
		w.Compression = ota.CompressionZstdPrefix
	}
	sum := sha256.Sum256(data)
	w.IndexSHA256 = hex.EncodeToString(sum[:])
	for r := raw[HeaderSize2:]; len(r) >= RecordSize2; r = r[RecordSize2:] {
		w.StoreSize += int64(getRecord2(r).stored)
	}
	if err := w.Validate(); err != nil {
		return nil, err
	}
	if n := IndexSize2(w.ChunkCount); int64(len(raw)) != n {
		return nil, indexErr("index", "decompresses to %d bytes, %d chunks take %d", len(raw), w.ChunkCount, n)
	}
	// Checked as decompressed, not decompressed again (ParseIndex): a
	// device reads its kept index before an install, and a second copy
	// of it would stand beside the install's buffers.
	x, err := index2From(data, raw, w)
	if err != nil {
		return nil, err
	}
	x.sum = sum
	return x, nil
}

// keptSize bounds what a kept version 2 index decompresses to: the size its frame
// header declares (otactl writes one single-segment frame), else MaxIndexSize. The
// bound sizes the buffer it is decoded into, so it is not MaxIndexSize whenever it
// need not be: that buffer would be the largest allocation of an install.
func keptSize(data []byte) int64 {
	var h zstd.Header
	if h.Decode(data) == nil && h.HasFCS && h.FrameContentSize <= MaxIndexSize {
		return int64(h.FrameContentSize)
	}
	return MaxIndexSize
}
