package payload

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"
	"github.com/otad/otad/ota"
)

// DeltaDecoder rebuilds chunks from their deltas and the older image's bytes, checked
// against the index. Its buffers are one chunk and one dictionary (MaxDict) or binary
// diff patch (maxPatch), one buffer for either; a frame is never decoded past the chunk.
// For one goroutine at a time.
type DeltaDecoder struct {
	x   *Index
	zd  *zstd.Decoder
	buf []byte
	// work is a delta's dictionary or a binary diff's patch, never both at
	// once: made at the first delta.
	work []byte
	// pd decodes binary diffs (method 1): made at the first one.
	pd *zstd.Decoder
	// shared: zd and buf are a PrefixDecoder's (Share), which closes zd.
	shared bool
}

// Share makes d decode with p's zstd decoder and chunk buffer, for the
// deltas and the binary diffs' patches both, and lets go of its own: an
// install decodes its deltas and its zstd-prefix store's chunks in one
// goroutine, in image order, and p's window (a prefix of at least two
// chunks, and a chunk) is at least a delta's (a dictionary of two chunks,
// and a chunk) and a patch's, so one zstd state serves both (about 1 MiB
// less at an install's peak). The results of either are then valid until
// the next Decode of either. A p whose window is smaller is not shared.
func (d *DeltaDecoder) Share(p *PrefixDecoder) {
	if d.shared || prefixWindow(PrefixSize(p.x), p.x.MaxChunk()) < max(deltaWindow(d.x), patchWindow(d.x.MaxChunk())) {
		return
	}
	d.zd.Close()
	if d.pd != nil {
		d.pd.Close()
		d.pd = nil
	}
	d.zd, d.buf, d.shared = p.zd, p.buf, true
}

// NewDeltaDecoder returns a DeltaDecoder for x's chunks. Close it when done.
func NewDeltaDecoder(x *Index) (*DeltaDecoder, error) {
	zd, err := zstd.NewReader(nil,
		zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxMemory(uint64(deltaWindow(x))),
		zstd.WithDecoderMaxWindow(uint64(deltaWindow(x))),
		zstd.WithDecodeAllCapLimit(true))
	if err != nil {
		return nil, fmt.Errorf("delta decoder: %w", err)
	}
	return &DeltaDecoder{x: x, zd: zd, buf: make([]byte, x.MaxChunk()+decodeSlack)}, nil
}

// workBuf is d.work, made at the first call.
func (d *DeltaDecoder) workBuf() []byte {
	if d.work == nil {
		d.work = make([]byte, max(MaxDict(d.x), maxPatch(d.x.MaxChunk())))
	}
	return d.work
}

// Close releases the decoder's resources.
func (d *DeltaDecoder) Close() {
	if !d.shared {
		d.zd.Close()
	}
	if d.pd != nil {
		d.pd.Close()
	}
}

// Decode returns chunk dc.Chunk rebuilt from frame, its delta, with the dictionary read
// from old (the booted slot, holding the older image), after checking it against the
// index's SHA-256. Old bytes that are not the older image's (a booted slot changed
// since) make another chunk, refused: a chunk_mismatch naming delta.chunk[i], as is a
// corrupt frame or one decoding to more or less than the chunk. A failed read of old
// is returned as it is. The result is valid until the next Decode.
func (d *DeltaDecoder) Decode(dc DeltaChunk, frame []byte, old io.ReaderAt) ([]byte, error) {
	c := d.x.Chunk(dc.Chunk)
	bad := func(format string, args ...any) error {
		return ota.FieldErrorf(ota.CodeChunkMismatch, fmt.Sprintf("delta.chunk[%d]", dc.Chunk), format, args...)
	}
	if len(frame) != dc.Length {
		return nil, bad("%d delta bytes, the delta index says %d", len(frame), dc.Length)
	}
	if dc.Method == deltaMethodDiff {
		out, err := d.diff(dc, c, frame, old)
		if err != nil {
			return nil, err
		}
		return d.check(dc, c, out)
	}
	dict := d.workBuf()[:0]
	for _, r := range dc.Ranges[:dc.N] {
		n := len(dict)
		dict = dict[:n+int(r.Len)]
		if _, err := old.ReadAt(dict[n:], r.Off); err != nil {
			return nil, fmt.Errorf("delta of chunk %d: read the booted slot at %d: %w", dc.Chunk, r.Off, err)
		}
	}
	if err := d.zd.ResetWithOptions(nil, zstd.WithDecoderDictRaw(0, dict)); err != nil {
		return nil, fmt.Errorf("delta decoder: %w", err)
	}
	out, err := d.zd.DecodeAll(frame, d.buf[:0:c.Length+decodeSlack])
	if err != nil {
		return nil, bad("decompress: %w", err)
	}
	if len(out) != c.Length {
		return nil, bad("decompresses to %d bytes, want %d", len(out), c.Length)
	}
	return d.check(dc, c, out)
}

// check returns out, chunk dc.Chunk as a delta made it, if its SHA-256 is the index's.
func (d *DeltaDecoder) check(dc DeltaChunk, c Chunk, out []byte) ([]byte, error) {
	if sum := sha256.Sum256(out); sum != c.SHA256 {
		return nil, ota.FieldErrorf(ota.CodeChunkMismatch, fmt.Sprintf("delta.chunk[%d]", dc.Chunk),
			"sha256 %x, index says %x: the booted slot does not hold the older image's bytes", sum, c.SHA256)
	}
	return out, nil
}

// diff makes chunk c from its binary diff frame and the ranges of old it names,
// read where the patch adds them. The patch is decompressed whole: at most
// maxPatch of the largest chunk.
func (d *DeltaDecoder) diff(dc DeltaChunk, c Chunk, frame []byte, old io.ReaderAt) ([]byte, error) {
	bad := func(format string, args ...any) error {
		return ota.FieldErrorf(ota.CodeChunkMismatch, fmt.Sprintf("delta.chunk[%d]", dc.Chunk), format, args...)
	}
	pd := d.pd
	switch {
	case d.shared:
		// A patch is a frame of its own, with no dictionary.
		if err := d.zd.ResetWithOptions(nil, zstd.WithDecoderDictDelete()); err != nil {
			return nil, fmt.Errorf("delta decoder: %w", err)
		}
		pd = d.zd
	case pd == nil:
		limit := maxPatch(d.x.MaxChunk())
		var err error
		pd, err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxMemory(uint64(limit)), zstd.WithDecoderMaxWindow(uint64(patchWindow(d.x.MaxChunk()))),
			zstd.WithDecodeAllCapLimit(true))
		if err != nil {
			return nil, fmt.Errorf("delta decoder: %w", err)
		}
		d.pd = pd
	}
	patch, err := pd.DecodeAll(frame, d.workBuf()[:0:maxPatch(d.x.MaxChunk())])
	if err != nil {
		return nil, bad("decompress the binary diff: %w", err)
	}
	src := rangesReader{r: old, rs: dc.Ranges[:dc.N]}
	out, err := applyPatch(d.buf[:0:c.Length], patch, c.Length, src, dc.DictLen())
	switch {
	case errors.Is(err, errPatch):
		return nil, bad("%w", err)
	case err != nil:
		return nil, fmt.Errorf("delta of chunk %d: read the booted slot: %w", dc.Chunk, err)
	}
	return out, nil
}
