package payload

import (
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
// sets up tables for each frame's dictionary, in proportion to its length (1 MiB:
// about 11x the CPU of a zstd store, 256 KiB 4x; the workers of buildpool.go spread
// it over the CPUs).

// PrefixSize is the most bytes of the image before a chunk that its dictionary holds
// in a store of compression zstd-prefix, as its index's header says (prefix_size);
// 0 for any other store.
func PrefixSize(x *Index) int64 { return x.prefixSize }

// DefaultPrefixSize is the dictionary Build gives each chunk of a zstd-prefix store
// unless told otherwise. On the 1 GiB Debian ext4 of make bench-delta 2 × max_size
// (256 KiB, the rule before prefix_size) left index and store 1.097x the zstd stream;
// 1 MiB brings them within 1.05x (docs/contract/chunked.md has the figures). 2 MiB,
// the stream's window, saves a little more, but a device keeps the prefix half as
// large again (History): 3 MiB would take a chunked install of that image past 16 MiB.
const DefaultPrefixSize = 1 << 20

// MaxPrefixSize bounds the prefix_size an index may ask for: a device keeps twice that
// many bytes of the image (History), within its 16 MiB.
const MaxPrefixSize = 4 << 20

// prefixFor is the dictionary bound of a zstd-prefix index of chunks of at most
// maxChunk bytes whose header says field, or -1 when field is not one: 0 is
// 2 × maxChunk (the rule before the field, which an older device still reads),
// else a power of two from 2 × maxChunk to MaxPrefixSize.
func prefixFor(field uint32, maxChunk int64) int64 {
	n := int64(field)
	switch {
	case n == 0:
		return 2 * maxChunk
	case n&(n-1) != 0 || n < 2*maxChunk || n > MaxPrefixSize:
		return -1
	}
	return n
}

// prefixOption is the prefix Build gives the chunks of a zstd-prefix store of chunks
// of at most maxChunk bytes (Options.PrefixSize); 0 for any other store.
func prefixOption(opts Options, maxChunk int64) (int64, error) {
	n := opts.PrefixSize
	switch {
	case opts.Compression != ota.CompressionZstdPrefix && n != 0:
		return 0, fmt.Errorf("build payload: a prefix size with compression %s", opts.Compression)
	case opts.Compression != ota.CompressionZstdPrefix:
		return 0, nil
	case n == 0:
		return max(DefaultPrefixSize, 2*maxChunk), nil
	}
	if n == 2*maxChunk || prefixFor(uint32(min(n, 1<<32-1)), maxChunk) == n {
		return n, nil
	}
	return 0, fmt.Errorf("build payload: prefix size %d: want %d or a power of two from there to %d", n, 2*maxChunk, int64(MaxPrefixSize))
}

// prefixField is what a header says of prefix, prefixFor's inverse.
func prefixField(prefix, maxChunk int64) uint32 {
	if prefix == 2*maxChunk {
		return 0
	}
	return uint32(prefix)
}

// prefixWindow is the zstd window of a zstd-prefix frame: its dictionary and its chunk.
func prefixWindow(prefix, maxChunk int64) int {
	return 1 << bits.Len64(uint64(prefix+maxChunk-1))
}

// History keeps the last bytes of an image written in order: the dictionary of the
// next chunk of a zstd-prefix store. What it keeps is one slice, in a buffer half as
// large again (a device's memory: 1.5 MiB for the 1 MiB of DefaultPrefixSize), so that
// the bytes kept move once for every half of them added.
type History struct {
	buf  []byte
	size int
}

// NewHistory returns a History keeping the last size bytes.
func NewHistory(size int64) *History {
	return &History{buf: make([]byte, 0, size+size/2), size: int(size)}
}

// Bytes is the last bytes added, at most the size kept; valid until the next Add.
func (h *History) Bytes() []byte {
	if len(h.buf) > h.size {
		return h.buf[len(h.buf)-h.size:]
	}
	return h.buf
}

// room makes room for n more bytes, n less than the size kept: when the buffer is
// full, the bytes still kept after those n move to its start.
func (h *History) room(n int) {
	if len(h.buf)+n > cap(h.buf) {
		keep := h.size - n
		h.buf = h.buf[:copy(h.buf, h.buf[len(h.buf)-keep:])]
	}
}

// Add appends b, the image's next bytes.
func (h *History) Add(b []byte) {
	if len(b) >= h.size {
		h.buf = append(h.buf[:0], b[len(b)-h.size:]...)
		return
	}
	h.room(len(b))
	h.buf = append(h.buf, b...)
}

// AddZeros appends n zero bytes (a zero run).
func (h *History) AddZeros(n int64) {
	if n >= int64(h.size) {
		h.buf = h.buf[:h.size]
		clear(h.buf)
		return
	}
	h.room(int(n))
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
	w := uint64(prefixWindow(PrefixSize(x), x.MaxChunk()))
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
	return checked(i, c, out)
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
