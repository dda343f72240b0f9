package slots

import (
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"
	"github.com/xi2/xz"

	"github.com/otad/otad/ota"
)

// maxDecoderWindow bounds a decoder's history buffer (zstd window, xz
// dictionary), and so its memory: the payload is hostile until its hash
// matches, so what the stream declares must not size an allocation.
// zstd -19 uses 8 MiB, xz -6 8 MiB; --long=25 and xz -8 still fit; larger
// windows are refused, keeping the daemon inside its unit's MemoryMax.
const maxDecoderWindow = 32 << 20

// decodes reports whether a stream payload compressed with c has a decoder
// (newDecoder passes the others' bytes on as they are).
func decodes(c ota.Compression) bool {
	return c != "" && c != ota.CompressionNone
}

// newDecoder wraps src in the payload's decompressor. The returned reader's
// errors other than io.EOF are *ota.Error or context errors, so that a caller
// can tell a short stream (io.EOF, io.ErrUnexpectedEOF from io.ReadFull)
// from a corrupt or failed one.
func newDecoder(ctx context.Context, r io.Reader, compression ota.Compression, url string) (io.Reader, func(), error) {
	src := &sourceErr{r: r}
	wrap := func(err error) error {
		if src.err != nil {
			// Decoders do not all wrap their source's error (zstd reports a
			// download cut off at its limit as an unexpected EOF).
			err = src.err
		}
		return classifyDecodeErr(ctx, err, compression, url)
	}
	if !decodes(compression) {
		return src, func() {}, nil
	}
	switch compression {
	case ota.CompressionGzip:
		// The bufio.Reader gives gzip the io.ByteReader it needs without it
		// adding its own small one.
		zr, err := gzip.NewReader(bufio.NewReaderSize(src, 64<<10))
		if err != nil {
			return nil, nil, wrap(err)
		}
		return &decodeReader{r: zr, wrap: wrap}, func() { zr.Close() }, nil
	case ota.CompressionZstd:
		zr, err := zstd.NewReader(src,
			zstd.WithDecoderLowmem(true),
			zstd.WithDecoderConcurrency(1),
			zstd.WithDecoderMaxWindow(maxDecoderWindow),
			zstd.WithDecoderMaxMemory(maxDecoderWindow))
		if err != nil {
			return nil, nil, wrap(err)
		}
		return &decodeReader{r: zr, wrap: wrap}, zr.Close, nil
	case ota.CompressionXZ:
		// Not ulikunitz/xz: its ReaderConfig.DictCap is a floor that a
		// stream's declared dictionary (up to 4 GiB) raises; this decoder
		// refuses a larger one (ErrMemlimit).
		xr, err := xz.NewReader(src, maxDecoderWindow)
		if err != nil {
			return nil, nil, wrap(err)
		}
		return &decodeReader{r: xr, wrap: wrap}, func() {}, nil
	}
	return nil, nil, ota.Wrap(ota.CodeDownloadFailed, fmt.Errorf("payload %s: unsupported compression %q", url, compression))
}

// sourceErr remembers the source's final verdict.
type sourceErr struct {
	r   io.Reader
	err *ota.Error
}

func (s *sourceErr) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	var e *ota.Error
	if errors.As(err, &e) {
		s.err = e
	}
	return n, err
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
func classifyDecodeErr(ctx context.Context, err error, compression ota.Compression, url string) error {
	var e *ota.Error
	if errors.As(err, &e) {
		return e
	}
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	return ota.Wrap(ota.CodeDownloadFailed, fmt.Errorf("decompress %s payload %s: corrupt or truncated: %w", compression, url, err))
}
