package slots

import (
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

// zstdMaxWindow bounds the zstd decoder's history buffer, and so its memory.
// zstd -19 uses 8 MiB; --long=25 still fits; larger windows are refused.
const zstdMaxWindow = 32 << 20

// Compression names of the manifest (SPEC §3).
const (
	compressionNone = "none"
	compressionGzip = "gzip"
	compressionZstd = "zstd"
	compressionXz   = "xz"
)

func knownCompression(c string) bool {
	switch c {
	case "", compressionNone, compressionGzip, compressionZstd, compressionXz:
		return true
	}
	return false
}

// newDecoder wraps src in the payload's decompressor. The returned reader's
// errors other than io.EOF are *Error or context errors, so that a caller
// can tell a short stream (io.EOF, io.ErrUnexpectedEOF from io.ReadFull)
// from a corrupt or failed one.
func newDecoder(ctx context.Context, src io.Reader, compression, url string) (io.Reader, func(), error) {
	wrap := func(err error) error {
		return classifyDecodeErr(ctx, err, compression, url)
	}
	switch compression {
	case "", compressionNone:
		return src, func() {}, nil
	case compressionGzip:
		// The bufio.Reader gives gzip the io.ByteReader it needs without it
		// adding its own small one.
		zr, err := gzip.NewReader(bufio.NewReaderSize(src, 64<<10))
		if err != nil {
			return nil, nil, wrap(err)
		}
		return &decodeReader{r: zr, wrap: wrap}, func() { zr.Close() }, nil
	case compressionZstd:
		zr, err := zstd.NewReader(src,
			zstd.WithDecoderLowmem(true),
			zstd.WithDecoderConcurrency(1),
			zstd.WithDecoderMaxWindow(zstdMaxWindow))
		if err != nil {
			return nil, nil, wrap(err)
		}
		return &decodeReader{r: zr, wrap: wrap}, zr.Close, nil
	case compressionXz:
		xr, err := xz.NewReader(bufio.NewReaderSize(src, 64<<10))
		if err != nil {
			return nil, nil, wrap(err)
		}
		return &decodeReader{r: xr, wrap: wrap}, func() {}, nil
	}
	return nil, nil, newError(CodeDownloadFailed, fmt.Errorf("payload %s: unsupported compression %q", url, compression))
}

type decodeReader struct {
	r    io.Reader
	wrap func(error) error
}

func (d *decodeReader) Read(p []byte) (int, error) {
	n, err := d.r.Read(p)
	if err != nil && err != io.EOF {
		err = d.wrap(err)
	}
	return n, err
}

// classifyDecodeErr keeps the source's own verdicts (final download errors,
// cancellation) and calls anything else a corrupt payload.
func classifyDecodeErr(ctx context.Context, err error, compression, url string) error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	return newError(CodeDownloadFailed, fmt.Errorf("decompress %s payload %s: corrupt or truncated: %w", compression, url, err))
}
