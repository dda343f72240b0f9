package payload

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"

	"github.com/klauspost/compress/zstd"
	"github.com/otad/otad/ota"
)

// Options choose how Build cuts an image.
type Options struct {
	// ChunkSize is a power of two from MinChunkSize to MaxChunkSize; 0 means
	// DefaultChunkSize.
	ChunkSize int64
	// Compression is ota.CompressionZstd (the default, for ""), ota.CompressionNone,
	// or with Chunking cdc ota.CompressionZstdPrefix: each chunk compressed with the
	// image's bytes before it as its dictionary (prefix.go).
	Compression ota.Compression
	// Level is a zstd level as the zstd tool counts (1-22); 0 means 3.
	Level int
	// PrefixSize is, with zstd-prefix, the most bytes of the image before a chunk that
	// its dictionary holds: 0 means DefaultPrefixSize, or 2 × the largest chunk when
	// that is more; else 2 × the largest chunk or a power of two from there to
	// MaxPrefixSize (docs/contract/chunked.md, prefix_size).
	PrefixSize int64
	// Workers compress the chunks of content-defined chunking at once, each with its
	// own encoder (buildpool.go); 0 means one per CPU, up to 4. The store is the same
	// whatever their number.
	Workers int
	// Chunking is ota.ChunkingFixed (for "": index version 1, every chunk ChunkSize
	// bytes) or ota.ChunkingCDC (version 2: content-defined chunks averaging
	// ChunkSize bytes, zero runs of any length).
	Chunking ota.Chunking
}

// Result describes what Build wrote: everything a schema-2 manifest needs.
type Result struct {
	Index       []byte // the whole index file
	IndexSHA256 [sha256.Size]byte
	StoreSize   int64
	ImageSize   int64
	ImageSHA256 [sha256.Size]byte
	ChunkSize   int64
	ChunkCount  int64
	Compression ota.Compression
	Chunking    ota.Chunking
	// Chunks of each kind.
	Zero, Raw, Zstd int64
}

// Expect is what a manifest made from r says, for ParseIndex.
func (r *Result) Expect() Expect {
	return Expect{
		ChunkSize:   r.ChunkSize,
		ChunkCount:  r.ChunkCount,
		ImageSize:   r.ImageSize,
		IndexSize:   int64(len(r.Index)),
		IndexSHA256: hex.EncodeToString(r.IndexSHA256[:]),
		StoreSize:   r.StoreSize,
		Compression: r.Compression,
		Chunking:    r.Chunking,
	}
}

// Chunks is the manifest's payload.chunks for r, its files served at url.idx and
// url.store.
func (r *Result) Chunks(url string) *ota.Chunks {
	return &ota.Chunks{
		Size:        r.ChunkSize,
		Count:       r.ChunkCount,
		IndexURL:    url + ".idx",
		IndexSize:   int64(len(r.Index)),
		IndexSHA256: hex.EncodeToString(r.IndexSHA256[:]),
		StoreURL:    url + ".store",
		StoreSize:   r.StoreSize,
		Compression: r.Compression,
		Chunking:    r.chunkingField(),
	}
}

// chunkingField is payload.chunks.chunking: absent for fixed chunks, so that a
// manifest of fixed chunks reads as it did before there were others.
func (r *Result) chunkingField() ota.Chunking {
	if r.Chunking == ota.ChunkingCDC {
		return r.Chunking
	}
	return ""
}

// Build reads image to its end and writes its store to store, one chunk at a time: an
// all-zero chunk is not stored, any other is one zstd frame, or raw when that is not
// smaller. Memory is a few chunk-sized buffers (with content-defined chunks, two jobs
// per worker of up to 3 × max_size bytes, and an encoder per worker: tens of MiB at
// the best level) plus the index (36 or 48 bytes per chunk, returned in Result.Index);
// the image is never held whole. An empty image is refused.
func Build(ctx context.Context, image io.Reader, store io.Writer, opts Options) (*Result, error) {
	if opts.ChunkSize == 0 {
		opts.ChunkSize = DefaultChunkSize
	}
	if !ValidChunkSize(opts.ChunkSize) {
		return nil, fmt.Errorf("build payload: chunk size %d is not a power of two from %d to %d", opts.ChunkSize, MinChunkSize, MaxChunkSize)
	}
	if opts.Compression == "" {
		opts.Compression = ota.CompressionZstd
	}
	switch opts.Chunking {
	case "":
		opts.Chunking = ota.ChunkingFixed
	case ota.ChunkingFixed, ota.ChunkingCDC:
	default:
		return nil, fmt.Errorf("build payload: chunking %q: want fixed or cdc", opts.Chunking)
	}
	b := &builder{
		res:   Result{ChunkSize: opts.ChunkSize, Compression: opts.Compression, Chunking: opts.Chunking},
		store: store,
		image: sha256.New(),
	}
	maxChunk := opts.ChunkSize
	if opts.Chunking == ota.ChunkingCDC {
		maxChunk = CDCFor(opts.ChunkSize).Max
		b.index = make([]byte, HeaderSize2, HeaderSize2+16*RecordSize2)
	} else {
		b.buf = make([]byte, opts.ChunkSize)
		b.index = make([]byte, HeaderSize, HeaderSize+16*RecordSize)
	}
	var enc func() (*zstd.Encoder, error)
	switch opts.Compression {
	case ota.CompressionZstd, ota.CompressionZstdPrefix:
		enc = func() (*zstd.Encoder, error) { return newChunkEncoder(opts, maxChunk) }
	case ota.CompressionNone:
	default:
		return nil, fmt.Errorf("build payload: compression %q: want zstd, zstd-prefix or none", opts.Compression)
	}
	var err error
	if opts.PrefixSize, err = prefixOption(opts, maxChunk); err != nil {
		return nil, err
	}
	if opts.Chunking == ota.ChunkingCDC {
		if err := b.run2(ctx, image, enc, opts); err != nil {
			return nil, err
		}
		return &b.res, nil
	}
	if enc != nil {
		if b.enc, err = enc(); err != nil {
			return nil, err
		}
		defer b.enc.Close()
		b.zbuf = make([]byte, 0, maxChunk)
	}
	if err := b.run(ctx, image); err != nil {
		return nil, err
	}
	return &b.res, nil
}

// newChunkEncoder is the encoder of a store's chunks: each one frame, without a
// checksum (every chunk is hashed anyway). A zstd frame declares its size and its
// window is the chunk; a zstd-prefix frame's window is its dictionary and its chunk.
func newChunkEncoder(opts Options, maxChunk int64) (*zstd.Encoder, error) {
	level := opts.Level
	if level == 0 {
		level = 3
	}
	eo := []zstd.EOption{
		zstd.WithEncoderLevel(zstd.EncoderLevelFromZstd(level)),
		zstd.WithEncoderConcurrency(1),
		zstd.WithEncoderCRC(false),
		zstd.WithZeroFrames(true),
	}
	if opts.Compression == ota.CompressionZstdPrefix {
		if opts.Chunking != ota.ChunkingCDC {
			return nil, errors.New("build payload: compression zstd-prefix needs chunking cdc")
		}
		eo = append(eo, zstd.WithWindowSize(prefixWindow(opts.PrefixSize, maxChunk)))
	} else {
		eo = append(eo, zstd.WithSingleSegment(true))
	}
	enc, err := zstd.NewWriter(nil, eo...)
	if err != nil {
		return nil, fmt.Errorf("build payload: zstd encoder: %w", err)
	}
	return enc, nil
}

type builder struct {
	res   Result
	store io.Writer
	image hash.Hash
	enc   *zstd.Encoder
	buf   []byte
	zbuf  []byte
	index []byte
}

func (b *builder) run(ctx context.Context, image io.Reader) error {
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("build payload: %w", err)
		}
		n, err := io.ReadFull(image, b.buf)
		if n > 0 {
			if err := b.add(b.buf[:n]); err != nil {
				return err
			}
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return fmt.Errorf("build payload: read image at offset %d: %w", b.res.ImageSize, err)
		}
	}
	if b.res.ImageSize == 0 {
		return errors.New("build payload: the image is empty")
	}
	h := header{
		chunkSize:   uint32(b.res.ChunkSize),
		compression: compNone,
		count:       uint64(b.res.ChunkCount),
		imageSize:   uint64(b.res.ImageSize),
	}
	if b.enc != nil {
		h.compression = compZstd
	}
	h.put(b.index[:HeaderSize])
	b.res.Index = b.index
	b.res.IndexSHA256 = sha256.Sum256(b.index)
	b.image.Sum(b.res.ImageSHA256[:0])
	return nil
}

// add stores one chunk and appends its record.
func (b *builder) add(chunk []byte) error {
	b.image.Write(chunk)
	r := record{sum: sha256.Sum256(chunk)}
	kind, stored, err := b.put(chunk)
	if err != nil {
		return err
	}
	r.kind, r.length = kind, uint32(len(stored))
	var rec [RecordSize]byte
	r.put(rec[:])
	b.index = append(b.index, rec[:]...)
	b.res.ImageSize += int64(len(chunk))
	return nil
}

// put writes one chunk to the store, zstd-compressed or raw, or not at all when it is
// zeros, and returns how it is stored.
func (b *builder) put(chunk []byte) (Kind, []byte, error) {
	var kind Kind
	var stored []byte
	switch {
	case AllZero(chunk):
		kind = KindZero
		b.res.Zero++
	case b.enc != nil:
		b.zbuf = b.enc.EncodeAll(chunk, b.zbuf[:0])
		if len(b.zbuf) < len(chunk) {
			kind, stored = KindZstd, b.zbuf
			b.res.Zstd++
			break
		}
		fallthrough
	default:
		kind, stored = KindRaw, chunk
		b.res.Raw++
	}
	if len(stored) > 0 {
		if _, err := b.store.Write(stored); err != nil {
			return 0, nil, fmt.Errorf("build payload: write chunk %d to the store at offset %d: %w", b.res.ChunkCount, b.res.StoreSize, err)
		}
	}
	b.res.StoreSize += int64(len(stored))
	b.res.ChunkCount++
	return kind, stored, nil
}

// encodePrefixed appends to dst chunk as one zstd frame whose raw dictionary is
// prefix. It writes the frame as a stream, one block then an empty last one, not
// with EncodeAll: EncodeAll resets the encoder with its dictionary once more, and
// at the best level each reset moves the encoder's 34 MiB of tables (3 more
// bytes a frame; signing twice as fast).
func encodePrefixed(enc *zstd.Encoder, prefix, chunk, dst []byte) ([]byte, error) {
	opt := zstd.WithEncoderDictDelete()
	if len(prefix) > 0 {
		opt = zstd.WithEncoderDictRaw(0, prefix)
	}
	w := appender{dst}
	if err := enc.ResetWithOptions(&w, opt); err != nil {
		return nil, fmt.Errorf("build payload: %w", err)
	}
	if _, err := enc.Write(chunk); err != nil {
		return nil, fmt.Errorf("build payload: %w", err)
	}
	if err := enc.Flush(); err != nil {
		return nil, fmt.Errorf("build payload: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("build payload: %w", err)
	}
	return w.b, nil
}

// appender is an io.Writer appending to a slice.
type appender struct{ b []byte }

func (a *appender) Write(p []byte) (int, error) {
	a.b = append(a.b, p...)
	return len(p), nil
}

// AllZero reports whether b is all zeros (and not empty). It compares b with itself
// shifted by one byte: every byte equals its neighbour, and the first is zero.
// bytes.Equal runs at memory speed, a byte loop does not.
func AllZero(b []byte) bool {
	return len(b) > 0 && b[0] == 0 && bytes.Equal(b[1:], b[:len(b)-1])
}

// run2 cuts the image into zero runs and content-defined chunks (a version 2 index),
// stores the chunks, compressed by opts.Workers workers (buildpool.go) with encoders
// made by enc (nil: raw), and compresses the index. With zstd-prefix each chunk's
// dictionary is the image's PrefixSize bytes before it.
func (b *builder) run2(ctx context.Context, image io.Reader, enc func() (*zstd.Encoder, error), opts Options) error {
	p := CDCFor(b.res.ChunkSize)
	var hist *History
	if opts.PrefixSize > 0 {
		hist = NewHistory(opts.PrefixSize)
	}
	pool, err := newChunkPool(opts.Workers, enc, opts.PrefixSize, p.Max)
	if err != nil {
		return err
	}
	defer pool.close()
	c := newCutter(image, p, b.image)
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("build payload: %w", err)
		}
		k, err := c.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("build payload: %w", err)
		}
		var prefix []byte
		if hist != nil {
			prefix = hist.Bytes()
		}
		if err := pool.add(k, prefix, b.finish); err != nil {
			return err
		}
		switch {
		case hist == nil:
		case k.data == nil:
			hist.AddZeros(k.n)
		default:
			hist.Add(k.data)
		}
	}
	if err := pool.drain(b.finish); err != nil {
		return err
	}
	return b.seal2(p, opts.PrefixSize, enc != nil)
}

// finish writes a job's chunk to the store, in image order, and appends its record.
func (b *builder) finish(j *chunkJob) error {
	if s := j.stored(); len(s) > 0 {
		if _, err := b.store.Write(s); err != nil {
			return fmt.Errorf("build payload: write chunk %d to the store at offset %d: %w", b.res.ChunkCount, b.res.StoreSize, err)
		}
		b.res.StoreSize += int64(len(s))
	}
	switch j.rec.kind {
	case KindZero:
		b.res.Zero++
	case KindRaw:
		b.res.Raw++
	default:
		b.res.Zstd++
	}
	b.res.ChunkCount++
	b.res.ImageSize += int64(j.rec.length)
	var rec [RecordSize2]byte
	j.rec.put(rec[:])
	b.index = append(b.index, rec[:]...)
	return nil
}

// seal2 puts the version 2 header and compresses the index.
func (b *builder) seal2(p CDC, prefix int64, compressed bool) error {
	if b.res.ImageSize == 0 {
		return errors.New("build payload: the image is empty")
	}
	h := header2{
		avg:       uint32(p.Avg),
		count:     uint64(b.res.ChunkCount),
		imageSize: uint64(b.res.ImageSize),
		min:       uint32(p.Min),
		max:       uint32(p.Max),
		pol:       p.Pol,
	}
	switch {
	case prefix > 0:
		h.compression, h.prefix = compZstdPrefix, prefixField(prefix, p.Max)
	case compressed:
		h.compression = compZstd
	}
	h.put(b.index[:HeaderSize2])
	var err error
	if b.res.Index, err = compressIndex(b.index); err != nil {
		return fmt.Errorf("build payload: %w", err)
	}
	b.res.IndexSHA256 = sha256.Sum256(b.res.Index)
	b.image.Sum(b.res.ImageSHA256[:0])
	return nil
}

// compressIndex is raw as one single-segment zstd frame: its header declares the size,
// and its window is no larger than the index.
func compressIndex(raw []byte) ([]byte, error) {
	enc, err := zstd.NewWriter(nil,
		zstd.WithEncoderLevel(zstd.SpeedBestCompression),
		zstd.WithEncoderConcurrency(1),
		zstd.WithEncoderCRC(false), // the manifest pins the index's sha256
		zstd.WithSingleSegment(true))
	if err != nil {
		return nil, fmt.Errorf("zstd encoder: %w", err)
	}
	defer enc.Close()
	return enc.EncodeAll(raw, nil), nil
}
