package payload

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"

	"github.com/otad/otad/ota"
)

// CheckStore reads store from its start to its end and checks it against x: exactly
// StoreSize bytes, every chunk decoding to its recorded SHA-256, and the image the
// chunks make hashing to imageSHA256 (64 hex digits, the manifest's payload.sha256).
// The chunks' bytes go to image as they are checked (io.Discard when only the check
// matters); image holds the image only when CheckStore returns nil.
// A chunk that fails is a chunk_mismatch *ota.Error, a store of the wrong length
// size_mismatch, an image with another hash hash_mismatch.
// Memory is one chunk and a decoder, whatever the store size.
func CheckStore(ctx context.Context, x *Index, store io.Reader, imageSHA256 string, image io.Writer) error {
	want, ok := ota.ParseSHA256(imageSHA256)
	if !ok {
		return fmt.Errorf("check store: image sha256 %q is not 64 hex digits", truncate(imageSHA256))
	}
	d, err := newInOrder(x)
	if err != nil {
		return err
	}
	defer d.close()
	buf := make([]byte, x.MaxChunk())
	img := sha256.New()
	out := io.MultiWriter(img, image)
	for i := range x.Count() {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("check store: %w", err)
		}
		c := x.Chunk(i)
		if c.Kind == KindZero {
			d.zeros(int64(c.Length))
			if err := writeZeros(out, int64(c.Length), buf); err != nil {
				return fmt.Errorf("check store: write chunk %d of the image: %w", i, err)
			}
			continue
		}
		stored := buf[:c.StoreLength]
		if n, err := io.ReadFull(store, stored); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return ota.Errorf(ota.CodeSizeMismatch, "check store: store ends at offset %d, in chunk %d; the index says %d bytes", c.StoreOffset+int64(n), i, x.storeSize)
			}
			return fmt.Errorf("check store: read chunk %d at offset %d: %w", i, c.StoreOffset, err)
		}
		b, err := d.decode(i, stored)
		if err != nil {
			return err
		}
		if _, err := out.Write(b); err != nil {
			return fmt.Errorf("check store: write chunk %d of the image: %w", i, err)
		}
	}
	var one [1]byte
	if n, _ := io.ReadFull(store, one[:]); n > 0 {
		return ota.Errorf(ota.CodeSizeMismatch, "check store: store is longer than the %d bytes the index says", x.storeSize)
	}
	if sum := [sha256.Size]byte(img.Sum(nil)); sum != want {
		return ota.Errorf(ota.CodeHashMismatch, "check store: the chunks make an image with sha256 %x, the manifest says %x", sum, want)
	}
	return nil
}

// writeZeros writes n zero bytes to w from buf, cleared.
func writeZeros(w io.Writer, n int64, buf []byte) error {
	clear(buf)
	for n > 0 {
		k := min(n, int64(len(buf)))
		if _, err := w.Write(buf[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}
