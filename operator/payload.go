package operator

import (
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"

	"github.com/otad/otad/ota"
)

const copyBufferSize = 1 << 20

type payloadInfo struct {
	size         int64  // raw image bytes
	sha256       string // of the raw image bytes
	downloadSize int64  // bytes of the written payload; 0 when none was written
}

// preparePayload streams the image once: hashing and counting the raw bytes and, when
// out is set, compressing them into out (written to a temporary file and renamed, so a
// failed run leaves no half payload behind). The image is never held in memory.
func preparePayload(ctx context.Context, image, compression, out string, prog *signProgress) (payloadInfo, error) {
	in, err := os.Open(image)
	if err != nil {
		return payloadInfo{}, fmt.Errorf("image: %w", err)
	}
	defer in.Close()

	hash := sha256.New()
	var raw countingWriter
	sinks := []io.Writer{hash, &raw}

	var (
		tmp     *outFile
		encoder io.WriteCloser
		written countingWriter
	)
	if out != "" {
		if tmp, err = createOut(out); err != nil {
			return payloadInfo{}, err
		}
		defer tmp.abort()
		written.w = tmp
		encoder, err = newEncoder(&written, compression)
		if err != nil {
			return payloadInfo{}, err
		}
		sinks = append(sinks, encoder)
	}

	buf := make([]byte, copyBufferSize)
	if _, err := io.CopyBuffer(io.MultiWriter(sinks...), prog.reader(ctxReader{ctx, in}), buf); err != nil {
		return payloadInfo{}, fmt.Errorf("image %s: %w", image, err)
	}
	if raw.n == 0 {
		return payloadInfo{}, fmt.Errorf("image %s: empty", image)
	}
	info := payloadInfo{size: raw.n, sha256: hex.EncodeToString(hash.Sum(nil))}
	if out == "" {
		return info, nil
	}
	if err := encoder.Close(); err != nil {
		return payloadInfo{}, fmt.Errorf("out-payload %s: %s: %w", out, compression, err)
	}
	if err := tmp.commit(); err != nil {
		return payloadInfo{}, err
	}
	info.downloadSize = written.n
	return info, nil
}

// streamWindow is the history a stream payload's decoder keeps (zstd window, xz
// dictionary): the device holds it while it installs, and 2 MiB keeps the whole
// install within 16 MiB (docs/contract/commands.md, sign; make bench-delta). zstd's
// best level makes up for the smaller window: on a 1 GiB Debian ext4 rootfs 76.36 MB,
// against 76.75 MB at the better level with its default 8 MiB window. Devices still
// accept windows up to 32 MiB from other tools.
const streamWindow = 2 << 20

func newEncoder(w io.Writer, compression string) (io.WriteCloser, error) {
	switch ota.Compression(compression) {
	case ota.CompressionNone:
		return nopCloser{w}, nil
	case ota.CompressionGzip:
		return gzip.NewWriterLevel(w, gzip.BestCompression)
	case ota.CompressionZstd:
		return zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedBestCompression), zstd.WithWindowSize(streamWindow))
	case ota.CompressionXZ:
		return xz.WriterConfig{DictCap: streamWindow}.NewWriter(w)
	}
	return nil, fmt.Errorf("unknown compression %q", compression)
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	if c.w == nil {
		c.n += int64(len(p))
		return len(p), nil
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// ctxReader stops a long copy when the context ends (Ctrl-C on a multi-GiB image).
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
