package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"

	"github.com/klauspost/compress/zstd"
	"github.com/xi2/xz"
	"golang.org/x/sys/unix"

	"github.com/otad/otad/ota"
)

// kind is a stream payload of the image: raw, zstd or xz.
type kind struct {
	name        string
	compression ota.Compression
	path        string // the payload file, served by the bench
}

// streamWindow is otactl's window for stream payloads (operator/payload.go):
// the decoders' history, and so their memory, is what a device gets.
const streamWindow = 2 << 20

// makeKinds writes the image's zstd and xz payloads beside it. The image is
// random, so both store it nearly as it is: their rows measure each
// decoder's per-byte cost and the pipeline's, not a compression ratio.
func makeKinds(image string) ([]kind, error) {
	kinds := []kind{
		{name: "raw", compression: ota.CompressionNone, path: image},
		{name: "zstd", compression: ota.CompressionZstd, path: image + ".zst"},
		{name: "xz", compression: ota.CompressionXZ, path: image + ".xz"},
	}
	if err := compressFile(image, kinds[1].path, func(w io.Writer) (io.WriteCloser, error) {
		return zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithWindowSize(streamWindow))
	}); err != nil {
		return nil, err
	}
	if err := writeStoredXZ(image, kinds[2].path); err != nil {
		return nil, err
	}
	return kinds, nil
}

func compressFile(src, dst string, enc func(io.Writer) (io.WriteCloser, error)) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("payload %s: %w", dst, err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return fmt.Errorf("payload %s: %w", dst, err)
	}
	defer out.Close()
	bw := bufio.NewWriterSize(out, ioChunk)
	w, err := enc(bw)
	if err != nil {
		return fmt.Errorf("payload %s: %w", dst, err)
	}
	if _, err := io.CopyBuffer(w, onlyReader{in}, make([]byte, ioChunk)); err != nil {
		return fmt.Errorf("payload %s: %w", dst, err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("payload %s: %w", dst, err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("payload %s: %w", dst, err)
	}
	return out.Close()
}

// decoder opens k's payload file and decodes it as the slot writer does
// (slots/decompress.go: zstd low-memory on one goroutine, xi2/xz).
func decoder(k kind) (io.Reader, func(), error) {
	f, err := os.Open(k.path)
	if err != nil {
		return nil, nil, fmt.Errorf("ideal %s: %w", k.name, err)
	}
	switch k.compression {
	case ota.CompressionZstd:
		zr, err := zstd.NewReader(f, zstd.WithDecoderLowmem(true), zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(32<<20))
		if err != nil {
			f.Close()
			return nil, nil, fmt.Errorf("ideal %s: %w", k.name, err)
		}
		return zr, func() { zr.Close(); f.Close() }, nil
	case ota.CompressionXZ:
		xr, err := xz.NewReader(f, 32<<20)
		if err != nil {
			f.Close()
			return nil, nil, fmt.Errorf("ideal %s: %w", k.name, err)
		}
		return xr, func() { f.Close() }, nil
	}
	return f, func() { f.Close() }, nil
}

// idealChunk is the ideal's read, write and read-back size.
const idealChunk = 1 << 20

// ideal is the least an install of kind k can do, one step after the
// other on one locked thread: read the payload (in the page cache),
// decompress, sha256, write slot with O_DIRECT, fdatasync; with readback,
// then read the slot back with O_DIRECT and hash it again (the limit of a
// read-back install). pin keeps the thread on CPU 0, as `taskset -c 0`
// keeps a pinned install.
func ideal(k kind, slot string, size int64, want string, readback, pin bool) (sample, error) {
	var s sample
	err := inProcess(&s, func() error {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if pin {
			var all, one unix.CPUSet
			if err := unix.SchedGetaffinity(0, &all); err != nil {
				return fmt.Errorf("ideal: %w", err)
			}
			one.Set(0)
			if err := unix.SchedSetaffinity(0, &one); err != nil {
				return fmt.Errorf("ideal: pin to CPU 0: %w", err)
			}
			defer unix.SchedSetaffinity(0, &all)
		}
		return idealRun(k, slot, size, want, readback)
	})
	return s, err
}

func idealRun(k kind, slot string, size int64, want string, readback bool) error {
	buf, err := unix.Mmap(-1, 0, idealChunk, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return fmt.Errorf("ideal: %w", err)
	}
	defer unix.Munmap(buf)
	src, closeSrc, err := decoder(k)
	if err != nil {
		return err
	}
	defer closeSrc()
	direct, err := os.OpenFile(slot, os.O_WRONLY|unix.O_DIRECT, 0)
	if err != nil {
		return fmt.Errorf("ideal: O_DIRECT: %w", err)
	}
	defer direct.Close()
	h := sha256.New()
	for done := int64(0); done < size; {
		n, err := io.ReadFull(src, buf[:min(int64(idealChunk), size-done)])
		if err != nil {
			return fmt.Errorf("ideal %s: read at %d: %w", k.name, done, err)
		}
		h.Write(buf[:n])
		if err := writeDirect(direct, buf[:n], done); err != nil {
			return err
		}
		done += int64(n)
	}
	if err := unix.Fdatasync(int(direct.Fd())); err != nil {
		return fmt.Errorf("ideal: %w", err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return fmt.Errorf("ideal %s: sha256 %s, want %s", k.name, got, want)
	}
	if !readback {
		return nil
	}
	in, err := os.OpenFile(slot, os.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		return fmt.Errorf("ideal: O_DIRECT: %w", err)
	}
	defer in.Close()
	h.Reset()
	for done := int64(0); done < size; {
		n := min(int64(idealChunk), size-done)
		got, err := in.ReadAt(buf[:(n+4095)/4096*4096], done)
		if int64(got) < n {
			return fmt.Errorf("ideal: read back at %d: %d bytes, %w", done, got, err)
		}
		h.Write(buf[:n])
		done += n
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return fmt.Errorf("ideal %s: read back sha256 %s, want %s", k.name, got, want)
	}
	return nil
}

// writeDirect writes b at off: its whole blocks with O_DIRECT, a last
// partial block through the page cache (which fdatasync flushes).
func writeDirect(f *os.File, b []byte, off int64) error {
	n := len(b) / 4096 * 4096
	if n > 0 {
		if _, err := f.WriteAt(b[:n], off); err != nil {
			return fmt.Errorf("ideal: write at %d: %w", off, err)
		}
	}
	if n == len(b) {
		return nil
	}
	g, err := os.OpenFile(f.Name(), os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("ideal: %w", err)
	}
	defer g.Close()
	if _, err := g.WriteAt(b[n:], off+int64(n)); err != nil {
		return fmt.Errorf("ideal: write at %d: %w", off+int64(n), err)
	}
	if err := g.Sync(); err != nil {
		return fmt.Errorf("ideal: %w", err)
	}
	return errors.Join(g.Close())
}
