package payload

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"
)

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
