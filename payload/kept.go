package payload

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"

	"github.com/otad/otad/ota"
)

// ParseKept parses an index a device kept from an earlier install, with no manifest at
// hand: the values ParseIndex checks against are taken from the index itself (its
// header, its size, its hash, the sum of its lengths), and everything else is checked
// as ParseIndex does, so a damaged file is refused rather than misread. What it
// describes is no more trusted than the file: a caller checks every chunk it takes
// on the strength of it.
func ParseKept(data []byte) (*Index, error) {
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
	if data[12] == compZstd {
		w.Compression = ota.CompressionZstd
	}
	sum := sha256.Sum256(data)
	w.IndexSHA256 = hex.EncodeToString(sum[:])
	// The lengths are 24 bits, so their sum fits whatever the count.
	for r := data[HeaderSize:]; len(r) >= RecordSize; r = r[RecordSize:] {
		w.StoreSize += int64(getRecord(r).length)
	}
	return ParseIndex(data, w)
}
