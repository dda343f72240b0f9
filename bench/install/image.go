package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"

	"golang.org/x/sys/unix"

	"github.com/otad/otad/internal/cli"
)

// ioChunk is the bench's own read/write size (the generator's and the
// checks'); large enough that syscalls cost nothing measurable.
const ioChunk = 4 << 20

// parseSize reads a positive byte count ("1GiB", "256MiB", "4096").
func parseSize(s string) (int64, error) {
	n, err := cli.ParseBytes(s)
	if err != nil {
		return 0, fmt.Errorf("size %w", err)
	}
	if n == 0 {
		return 0, fmt.Errorf("size %q: must be positive", s)
	}
	return n, nil
}

// generate writes size bytes of a fixed ChaCha8 stream to a new file at path
// and returns their sha256 in hex. Random bytes, so that nothing on the way
// (filesystem, virtual disk) can compress or deduplicate them; ChaCha8, so a
// 1 GiB image takes about a second and is the same in every run.
func generate(path string, size int64) (string, error) {
	return generateSeed(path, size, "otad")
}

// generateSeed is generate with another stream: an image that shares no
// chunk with generate's.
func generateSeed(path string, size int64, seed string) (string, error) {
	var key [32]byte
	copy(key[:], seed)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("image: %w", err)
	}
	defer f.Close()
	rng := rand.NewChaCha8(key)
	h := sha256.New()
	buf := make([]byte, ioChunk)
	for left := size; left > 0; {
		b := buf[:min(int64(len(buf)), left)]
		_, _ = rng.Read(b) // never fails
		h.Write(b)
		if _, err := f.Write(b); err != nil {
			return "", fmt.Errorf("image %s: %w", path, err)
		}
		left -= int64(len(b))
	}
	// Synced, so that dropping it from the page cache (-source cold) works:
	// only clean pages can be dropped.
	if err := f.Sync(); err != nil {
		return "", fmt.Errorf("image %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("image %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Slot preparation modes (-slot).
const (
	slotFallocate = "fallocate"
	slotZeros     = "zeros"
)

// allocateSlot replaces path with a file of size bytes whose blocks are
// allocated but unwritten (fallocate), so every install writes into freshly
// allocated blocks as the baseline writes a fresh file, and nothing can
// extend a sparse file as it goes. Without fallocate support it writes zeros.
func allocateSlot(path string, size int64) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("slot %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("slot: %w", err)
	}
	defer f.Close()
	if err := unix.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
		if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.ENOSYS) {
			return fmt.Errorf("slot %s: fallocate %d bytes: %w", path, size, err)
		}
		return writeZeros(f, size)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("slot %s: %w", path, err)
	}
	return f.Close()
}

// zeroSlot creates path holding size written zero bytes: a slot whose
// blocks are all written, as a partition's are; installs then overwrite it.
func zeroSlot(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("slot: %w", err)
	}
	defer f.Close()
	if err := writeZeros(f, size); err != nil {
		return err
	}
	return f.Close()
}

func writeZeros(f *os.File, size int64) error {
	buf := make([]byte, ioChunk)
	for left := size; left > 0; {
		n := min(int64(len(buf)), left)
		if _, err := f.Write(buf[:n]); err != nil {
			return fmt.Errorf("slot %s: %w", f.Name(), err)
		}
		left -= n
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("slot %s: %w", f.Name(), err)
	}
	// Leave the cache as the install will find it: without the slot's pages.
	_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	return nil
}

// Source page-cache modes (-source).
const (
	sourceCached = "cached"
	sourceCold   = "cold"
)

// dropCache evicts path's (clean) pages from the page cache.
func dropCache(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("drop %s from the page cache: %w", path, err)
	}
	defer f.Close()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		return fmt.Errorf("drop %s from the page cache: %w", path, err)
	}
	return nil
}

// warmCache reads path through the page cache, so that it is all there.
func warmCache(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("cache %s: %w", path, err)
	}
	defer f.Close()
	if _, err := io.CopyBuffer(io.Discard, onlyReader{f}, make([]byte, ioChunk)); err != nil {
		return fmt.Errorf("cache %s: %w", path, err)
	}
	return nil
}

// onlyReader hides *os.File's WriterTo, which would bypass the buffer size.
type onlyReader struct{ io.Reader }

// fileSHA hashes the first n bytes of path and then drops them from the page
// cache again, so that checking a slot does not warm it for the next phase.
func fileSHA(path string, n int64) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.CopyBuffer(h, onlyReader{io.LimitReader(f, n)}, make([]byte, ioChunk)); err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	return hex.EncodeToString(h.Sum(nil)), nil
}
