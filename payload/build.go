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
	// Compression is ota.CompressionZstd (the default, for "") or ota.CompressionNone.
	Compression ota.Compression
	// Level is a zstd level as the zstd tool counts (1-22); 0 means 3.
	Level int
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
// smaller. Memory is a few chunk-sized buffers plus the index (36 bytes per chunk,
// returned in Result.Index); the image is never held whole. An empty image is refused.
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
	switch opts.Compression {
	case ota.CompressionZstd:
		level := opts.Level
		if level == 0 {
			level = 3
		}
		enc, err := zstd.NewWriter(nil,
			zstd.WithEncoderLevel(zstd.EncoderLevelFromZstd(level)),
			zstd.WithEncoderConcurrency(1),
			zstd.WithEncoderCRC(false), // every chunk is hashed anyway
			zstd.WithSingleSegment(true),
			zstd.WithZeroFrames(true))
		if err != nil {
			return nil, fmt.Errorf("build payload: zstd encoder: %w", err)
		}
		defer enc.Close()
		b.enc = enc
		b.zbuf = make([]byte, 0, maxChunk)
	case ota.CompressionNone:
	default:
		return nil, fmt.Errorf("build payload: compression %q: want zstd or none", opts.Compression)
	}
	run := b.run
	if opts.Chunking == ota.ChunkingCDC {
		run = b.run2
	}
	if err := run(ctx, image); err != nil {
		return nil, err
	}
	return &b.res, nil
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

// AllZero reports whether b is all zeros (and not empty). It compares b with itself
// shifted by one byte: every byte equals its neighbour, and the first is zero.
// bytes.Equal runs at memory speed, a byte loop does not.
func AllZero(b []byte) bool {
	return len(b) > 0 && b[0] == 0 && bytes.Equal(b[1:], b[:len(b)-1])
}

// run2 cuts the image into zero runs and content-defined chunks (a version 2 index),
// stores the chunks, and compresses the index.
func (b *builder) run2(ctx context.Context, image io.Reader) error {
	p := CDCFor(b.res.ChunkSize)
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
		r := record2{length: uint64(k.n)}
		if k.data == nil {
			r.kind = KindZero
			b.res.Zero++
			b.res.ChunkCount++
		} else {
			kind, stored, err := b.put(k.data)
			if err != nil {
				return err
			}
			r.kind, r.stored = kind, uint32(len(stored))
			if kind != KindZero {
				r.sum = sha256.Sum256(k.data)
			}
		}
		var rec [RecordSize2]byte
		r.put(rec[:])
		b.index = append(b.index, rec[:]...)
		b.res.ImageSize += k.n
	}
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
	if b.enc != nil {
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
