package payload

import (
	"crypto/sha256"
	"fmt"

	"github.com/klauspost/compress/zstd"
	"github.com/otad/otad/ota"
)

// decodeSlack is spare capacity past the chunk in a decode buffer: the zstd decoder
// decodes in place only with a little room at the end (32 bytes today), and otherwise
// falls back to growing its output. DecodeSlack is the same for DecodeInto's callers.
const (
	decodeSlack = 256
	DecodeSlack = decodeSlack
)

// Decoder turns stored chunks of one index back into their bytes, checked against the
// index. It decodes into the caller's buffer (DecodeInto) or its own, of one chunk,
// allocated at its first use (Decode); a stored chunk is never decoded past it. A
// Decoder is for one goroutine at a time.
type Decoder struct {
	x   *Index
	zd  *zstd.Decoder
	buf []byte
}

// NewDecoder returns a Decoder for x's chunks. Close it when done.
func NewDecoder(x *Index) (*Decoder, error) { return NewSharedDecoder(x, 1) }

// NewSharedDecoder returns a Decoder whose DecodeInto goroutines may call at once,
// with buffers that hold the chunk (Decode is still for one goroutine at a time):
// at most n decompress at a time, the others wait, and the decoder holds n sets of
// zstd buffers, not one per goroutine. Close it when done.
func NewSharedDecoder(x *Index, n int) (*Decoder, error) {
	d := &Decoder{x: x}
	if x.compression == ota.CompressionZstd {
		// A chunk is one frame of at most the chunk size, so neither its window nor
		// its output may be larger; a frame claiming more is refused before
		// decoding, not allocated for.
		zd, err := zstd.NewReader(nil,
			zstd.WithDecoderConcurrency(max(n, 1)),
			zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxMemory(uint64(x.MaxChunk())),
			zstd.WithDecoderMaxWindow(uint64(max(x.MaxChunk(), zstd.MinWindowSize))),
			zstd.WithDecodeAllCapLimit(true))
		if err != nil {
			return nil, fmt.Errorf("chunk decoder: %w", err)
		}
		d.zd = zd
	}
	return d, nil
}

// Close releases the decoder's resources.
func (d *Decoder) Close() {
	if d.zd != nil {
		d.zd.Close()
	}
}

// Decode returns chunk i's bytes from stored, its StoreLength bytes out of the store,
// after checking them against the index's SHA-256: a wrong length, a corrupt frame, a
// frame decoding to anything but the chunk's size, or a hash mismatch is an *ota.Error
// with code chunk_mismatch. The result is valid until the next Decode and, for a raw chunk,
// is stored itself. i must be in [0, Count()).
func (d *Decoder) Decode(i int, stored []byte) ([]byte, error) {
	return d.DecodeInto(i, stored, nil)
}

// DecodeInto is Decode into dst when its capacity holds the chunk and DecodeSlack
// bytes more (else into the Decoder's own buffer): a caller whose buffers are the
// chunks' keeps no second copy of each.
func (d *Decoder) DecodeInto(i int, stored, dst []byte) ([]byte, error) {
	c := d.x.Chunk(i)
	if len(stored) != c.StoreLength {
		return nil, chunkErr(i, "%d stored bytes, index says %d", len(stored), c.StoreLength)
	}
	if c.Kind == KindZstd && d.zd == nil {
		// A zstd-prefix chunk: PrefixDecoder's, with the bytes before it.
		return nil, chunkErr(i, "a zstd-prefix chunk decodes only with the image's bytes before it")
	}
	if c.Kind != KindRaw && cap(dst) < c.Length+DecodeSlack {
		if c.Kind == KindZero && c.Length > int(d.x.MaxChunk()) {
			// ParseIndex checked that the recorded hash is that of zeros. A
			// zero run longer than a chunk is written as zeros, never held.
			return nil, chunkErr(i, "a zero run of %d bytes is not decoded into a buffer", c.Length)
		}
		if d.buf == nil {
			d.buf = make([]byte, d.x.MaxChunk()+decodeSlack)
		}
		dst = d.buf
	}
	var out []byte
	switch c.Kind {
	case KindZero:
		out = dst[:c.Length]
		clear(out)
		return out, nil
	case KindRaw:
		out = stored
	case KindZstd:
		// The capacity limit stops the decoder a little past the chunk; anything
		// decoding to more than the chunk is refused below.
		var err error
		out, err = d.zd.DecodeAll(stored, dst[:0:c.Length+DecodeSlack])
		if err != nil {
			return nil, chunkErr(i, "decompress: %w", err)
		}
	}
	return checked(i, c, out)
}

// checked returns out if it is chunk i as the index records it: its length
// (a raw chunk's always is, its store length being its length) and SHA-256.
func checked(i int, c Chunk, out []byte) ([]byte, error) {
	if len(out) != c.Length {
		return nil, chunkErr(i, "decompresses to %d bytes, want %d", len(out), c.Length)
	}
	if sum := sha256.Sum256(out); sum != c.SHA256 {
		return nil, chunkErr(i, "sha256 %x, index says %x", sum, c.SHA256)
	}
	return out, nil
}
