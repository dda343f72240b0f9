package payload

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"math/bits"
)

// Placed deltas (docs/contract/chunked.md, "Where the older image holds a
// chunk"): the signer knows the older image, so it also says where that image
// holds each chunk it shares with the new one at another offset, as a copy
// record: one range, the chunk itself, with a frame that is a copy of its
// dictionary. A device whose booted slot holds the older image then reads only
// those ranges (and the same offsets for the chunks no record names) instead
// of scanning its whole slot to find them; every chunk so read is checked by
// its SHA-256 like any other.

// Copy reports where the older image holds chunk c when record dc is a copy
// record: one range of exactly c's length, and a frame no larger than a copy
// frame of c (CopyFrameSize). A record that only looks like one costs a read
// of its range and the chunk fetched whole: the device checks what it reads.
func (dc DeltaChunk) Copy(c Chunk) (int64, bool) {
	if dc.N != 1 || dc.Ranges[0].Len != int64(c.Length) || dc.Length > CopyFrameSize(c.Length) {
		return 0, false
	}
	return dc.Ranges[0].Off, true
}

// zstd's largest block, and the bytes of a copy frame's header and of each of
// its blocks (at most: the bitstream's five bytes are its longest).
const (
	zstdBlockMax   = 128 << 10
	copyFrameHead  = 4 + 1 + 1 + 4
	copyBlockBytes = 3 + 1 + 1 + 1 + 3 + 5
)

// CopyFrameSize is the most bytes a copy frame of n bytes takes.
func CopyFrameSize(n int) int {
	return copyFrameHead + copyBlockBytes*((n+zstdBlockMax-1)/zstdBlockMax)
}

// copyFrame is the zstd frame (RFC 8878) that decodes, with a raw dictionary of
// n bytes (at least 3), to that dictionary: in each block of up to 128 KiB one sequence, no
// literals and one match n bytes back, its codes in RLE mode so that no FSE
// table is needed. zstd's own encoders cut such a match into many (hundreds of
// bytes for 64 KiB).
func copyFrame(n int) []byte {
	b := binary.LittleEndian.AppendUint32(nil, 0xFD2FB528)
	win := bits.Len(uint(2*n - 1)) // the dictionary and the content
	win = max(win, 10)
	// Frame header: a 4-byte content size, a window, no dictionary ID, no checksum.
	b = append(b, 2<<6, byte(win-10)<<3)
	b = binary.LittleEndian.AppendUint32(b, uint32(n))
	of := uint32(n) + 3 // Offset_Value: a real offset, not a repeat
	ofCode := bits.Len32(of) - 1
	for done, m := 0, 0; done < n; done += m {
		m = min(n-done, zstdBlockMax)
		if r := n - done - m; r > 0 && r < 3 {
			m -= 3 - r // no match is shorter than 3 bytes: leave the last block 3
		}
		mlCode, mlBase, mlBits := matchLengthCode(m)
		// Read backward: offset's bits first, then the match length's (the
		// literal length, 0, has none); the closing 1 bit marks the end.
		acc := uint64(m-mlBase) | uint64(of-1<<ofCode)<<mlBits | 1<<(mlBits+ofCode)
		nb := (mlBits + ofCode + 1 + 7) / 8
		body := []byte{0, 1, 1<<6 | 1<<4 | 1<<2, 0, byte(ofCode), byte(mlCode)}
		for k := range nb {
			body = append(body, byte(acc>>(8*k)))
		}
		last := 0
		if done+m >= n {
			last = 1
		}
		h := uint32(last) | 2<<1 | uint32(len(body))<<3
		b = append(b, byte(h), byte(h>>8), byte(h>>16))
		b = append(b, body...)
	}
	return b
}

// matchLengthCode is zstd's code of match length m (3 to 131074), the code's
// baseline and its extra bits.
func matchLengthCode(m int) (code, base, nbits int) {
	if m < 35 {
		return m - 3, m, 0
	}
	bases := []struct{ base, bits int }{
		{35, 1}, {37, 1}, {39, 1}, {41, 1}, {43, 2}, {47, 2}, {51, 3}, {59, 3}, {67, 4}, {83, 4}, {99, 5},
		{131, 7}, {259, 8}, {515, 9}, {1027, 10}, {2051, 11}, {4099, 12}, {8195, 13}, {16387, 14}, {32771, 15}, {65539, 16},
	}
	for k := len(bases) - 1; ; k-- {
		if m >= bases[k].base {
			return 32 + k, bases[k].base, bases[k].bits
		}
	}
}

// keepCopy records chunk i, held by the older image at at (an offset other
// than its own), as a copy record; a chunk held at its own offset gets none
// (a device looks there
// anyway), nor one stored in fewer bytes than its copy frame.
func (res *DeltaResult) keepCopy(w io.Writer, raw []byte, i int, c Chunk, at int64, best *deltaEncoder, v2 bool) ([]byte, error) {
	if at == c.Offset || c.Length < 3 {
		return raw, nil
	}
	b := make([]byte, c.Length)
	if _, err := best.old.ReadAt(b, at); err != nil {
		return raw, fmt.Errorf("build delta: read the older image at %d: %w", at, err)
	}
	if sha256.Sum256(b) != c.SHA256 {
		// Held by the first 8 bytes of its hash only: no copy.
		return raw, nil
	}
	best.reset()
	best.frame, best.ranges = copyFrame(c.Length), []Range{{Off: at, Len: int64(c.Length)}}
	if len(best.frame) >= c.StoreLength {
		return raw, nil
	}
	n, size := res.Count, res.DeltasSize
	raw, err := res.keep(w, raw, i, c, best, v2)
	if err != nil {
		return raw, err
	}
	// A copy rebuilds nothing: its bytes stay held, not rebuilt.
	res.Rebuilt -= int64(c.Length)
	res.RebuiltStored -= int64(c.StoreLength)
	res.Copies += res.Count - n
	res.CopySize += res.DeltasSize - size
	return raw, nil
}
