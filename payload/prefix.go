package payload

import (
	"crypto/sha256"
	"fmt"
	"math/bits"

	"github.com/klauspost/compress/zstd"
	"github.com/otad/otad/ota"
)

// A store of compression zstd-prefix (docs/contract/chunked.md) compresses each chunk
// with the image's bytes before it as a raw zstd dictionary, up to PrefixSize of them:
// a chunk compressed alone loses the context a stream keeps (18% more bytes than the
// stream on an ext4 of a Debian /usr/lib, 3% with the prefix). A device still fetches
// and checks each chunk alone: it writes the image in order, so it holds the bytes
// before every chunk it decodes. Signing costs more: at the best level the encoder
// sets up tables for each frame's dictionary (about 4x the CPU of a zstd store; the
// workers of buildpool.go spread it over the CPUs).

// PrefixSize is the most bytes of the image before a chunk that its dictionary holds
// in a store of compression zstd-prefix: MaxDict, the delta dictionary's bound, so a
// device's decoder has one bound for both.
func PrefixSize(x *Index) int64 { return MaxDict(x) }

// prefixWindow is the zstd window of a zstd-prefix frame: its dictionary and its chunk.
func prefixWindow(maxChunk int64) int {
	return 1 << bits.Len64(uint64(3*maxChunk-1))
}

// History keeps the last bytes of an image written in order: the dictionary of the
// next chunk of a zstd-prefix store. Its buffer is twice the bytes kept, so that what
// it keeps is one slice and is moved once for every size bytes added.
type History struct {
	buf  []byte
	size int
}

// NewHistory returns a History keeping the last size bytes.
func NewHistory(size int64) *History {
	return &History{buf: make([]byte, 0, 2*size), size: int(size)}
}

// Bytes is the last bytes added, at most the size kept; valid until the next Add.
func (h *History) Bytes() []byte {
	if len(h.buf) > h.size {
		return h.buf[len(h.buf)-h.size:]
	}
	return h.buf
}

// Add appends b, the image's next bytes.
func (h *History) Add(b []byte) {
	if len(b) >= h.size {
		h.buf = append(h.buf[:0], b[len(b)-h.size:]...)
		return
	}
	if len(h.buf)+len(b) > cap(h.buf) {
		h.buf = h.buf[:copy(h.buf, h.Bytes())]
	}
	h.buf = append(h.buf, b...)
}

// AddZeros appends n zero bytes (a zero run).
func (h *History) AddZeros(n int64) {
	if n >= int64(h.size) {
		h.buf = h.buf[:h.size]
		clear(h.buf)
		return
	}
	if len(h.buf)+int(n) > cap(h.buf) {
		h.buf = h.buf[:copy(h.buf, h.Bytes())]
	}
	k := len(h.buf)
	h.buf = h.buf[:k+int(n)]
	clear(h.buf[k:])
}

// Reset forgets every byte kept.
func (h *History) Reset() { h.buf = h.buf[:0] }

// PrefixDecoder decodes the chunks of a zstd-prefix store, each with the image's bytes
// before it (a History's), checked against the index. Its buffers are one chunk and the
// zstd state of one frame; for one goroutine at a time.
type PrefixDecoder struct {
	x   *Index
	zd  *zstd.Decoder
	buf []byte
}

// NewPrefixDecoder returns a PrefixDecoder for x's chunks. Close it when done.
func NewPrefixDecoder(x *Index) (*PrefixDecoder, error) {
	w := uint64(prefixWindow(x.MaxChunk()))
	zd, err := zstd.NewReader(nil,
		zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxMemory(w),
		zstd.WithDecoderMaxWindow(w),
		zstd.WithDecodeAllCapLimit(true))
	if err != nil {
		return nil, fmt.Errorf("chunk decoder: %w", err)
	}
	return &PrefixDecoder{x: x, zd: zd, buf: make([]byte, x.MaxChunk()+decodeSlack)}, nil
}

// Close releases the decoder's resources.
func (d *PrefixDecoder) Close() { d.zd.Close() }

// Decode returns chunk i's bytes from stored, its StoreLength bytes out of the store,
// decoded with prefix, the image's bytes before the chunk (up to PrefixSize of them),
// after checking them against the index's SHA-256: a wrong length, a corrupt frame,
// a wrong prefix, a frame decoding to anything but the chunk's size, or a hash
// mismatch is a chunk_mismatch naming store.chunk[i]. A raw or zero chunk is checked
// as Decoder checks it. The result is valid until the next Decode.
func (d *PrefixDecoder) Decode(i int, stored, prefix []byte) ([]byte, error) {
	c := d.x.Chunk(i)
	if c.Kind != KindZstd {
		return (&Decoder{x: d.x, buf: d.buf}).DecodeInto(i, stored, nil)
	}
	if len(stored) != c.StoreLength {
		return nil, chunkErr(i, "%d stored bytes, index says %d", len(stored), c.StoreLength)
	}
	if int64(len(prefix)) > PrefixSize(d.x) || int64(len(prefix)) != min(c.Offset, PrefixSize(d.x)) {
		return nil, chunkErr(i, "a prefix of %d bytes, want the %d before the chunk", len(prefix), min(c.Offset, PrefixSize(d.x)))
	}
	opt := zstd.WithDecoderDictDelete()
	if len(prefix) > 0 {
		opt = zstd.WithDecoderDictRaw(0, prefix)
	}
	if err := d.zd.ResetWithOptions(nil, opt); err != nil {
		return nil, fmt.Errorf("chunk decoder: %w", err)
	}
	out, err := d.zd.DecodeAll(stored, d.buf[:0:c.Length+decodeSlack])
	if err != nil {
		return nil, chunkErr(i, "decompress: %w", err)
	}
	if len(out) != c.Length {
		return nil, chunkErr(i, "decompresses to %d bytes, want %d", len(out), c.Length)
	}
	if sum := sha256.Sum256(out); sum != c.SHA256 {
		return nil, chunkErr(i, "sha256 %x, index says %x", sum, c.SHA256)
	}
	return out, nil
}

// prefixed reports whether x's zstd chunks are decoded with the bytes before them.
func (x *Index) prefixed() bool { return x.compression == ota.CompressionZstdPrefix }

// Prefixed reports whether x's store is zstd-prefix: its zstd chunks decode only with
// the image's bytes before them (PrefixDecoder), not alone (Decoder refuses them).
func (x *Index) Prefixed() bool { return x.prefixed() }

// inOrder decodes a store's chunks in image order, whatever its compression: the
// zero runs are said (zeros), the other chunks decoded (decode).
type inOrder struct {
	d    *Decoder
	pd   *PrefixDecoder
	hist *History
}

func newInOrder(x *Index) (*inOrder, error) {
	if !x.prefixed() {
		d, err := NewDecoder(x)
		return &inOrder{d: d}, err
	}
	pd, err := NewPrefixDecoder(x)
	return &inOrder{pd: pd, hist: NewHistory(PrefixSize(x))}, err
}

func (o *inOrder) close() {
	if o.d != nil {
		o.d.Close()
	}
	if o.pd != nil {
		o.pd.Close()
	}
}

func (o *inOrder) zeros(n int64) {
	if o.hist != nil {
		o.hist.AddZeros(n)
	}
}

func (o *inOrder) decode(i int, stored []byte) ([]byte, error) {
	if o.pd == nil {
		return o.d.Decode(i, stored)
	}
	b, err := o.pd.Decode(i, stored, o.hist.Bytes())
	if err == nil {
		o.hist.Add(b)
	}
	return b, err
}
