package operator

import (
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"

	"github.com/klauspost/compress/zstd"
	"github.com/xi2/xz"

	"github.com/otad/otad/ota"
	"github.com/otad/otad/verify"
)

// decoder reads a payload back through its compression, as a device does.
func decoder(c ota.Compression, r io.Reader) (io.ReadCloser, error) {
	switch c {
	case "", ota.CompressionNone:
		return io.NopCloser(r), nil
	case ota.CompressionGzip:
		return gzip.NewReader(r)
	case ota.CompressionZstd:
		d, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, err
		}
		return d.IOReadCloser(), nil
	case ota.CompressionXZ:
		d, err := xz.NewReader(r, 0)
		return io.NopCloser(d), err
	}
	return nil, fmt.Errorf("unsupported compression %q", c)
}

// checkStream checks a stream payload file against the manifest as a device
// would: no longer than download_size when given, and decompressed, the
// image of the signed size and sha256 (size_mismatch, hash_mismatch,
// download_failed for a file that does not decompress).
func checkStream(p *verify.Payload, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if p.DownloadSize > 0 && st.Size() != p.DownloadSize {
		return ota.Errorf(ota.CodeSizeMismatch, "%s: %d bytes, the manifest's download_size is %d", path, st.Size(), p.DownloadSize)
	}
	d, err := decoder(p.Compression, bufio.NewReaderSize(f, copyBufferSize))
	if err != nil {
		return ota.Errorf(ota.CodeDownloadFailed, "%s: %s: %v", path, p.Compression, err)
	}
	defer d.Close()
	h := sha256.New()
	// One byte more than the image tells a longer one from a whole one.
	n, err := io.Copy(h, io.LimitReader(d, p.Size+1))
	if err != nil {
		return ota.Errorf(ota.CodeDownloadFailed, "%s: %s: %v", path, p.Compression, err)
	}
	if n != p.Size {
		return ota.Errorf(ota.CodeSizeMismatch, "%s: the image is %s bytes, the manifest says %d", path, sizeWords(n, p.Size), p.Size)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != p.SHA256 {
		return ota.Errorf(ota.CodeHashMismatch, "%s: the image has sha256 %s, the manifest says %s", path, got, p.SHA256)
	}
	return nil
}

func sizeWords(n, want int64) string {
	if n > want {
		return fmt.Sprintf("more than %d", want)
	}
	return fmt.Sprint(n)
}
