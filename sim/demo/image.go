package demo

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
)

// The first bytes of every demo image say whether it boots healthy; the demo's
// health check (Check) reads them from the booted slot.
const (
	GoodMarker   = "OTAD-DEMO-GOOD"
	BrokenMarker = "OTAD-DEMO-BROKEN"
)

// ImageSpec describes a demo root filesystem image.
type ImageSpec struct {
	Broken  bool   // starts with BrokenMarker instead of GoodMarker
	Version string // written after the marker, for people reading the slot
	Seed    uint64 // the same spec gives the same bytes
	Size    int64
}

// header is the image's first line.
func (s ImageSpec) header() string {
	m := GoodMarker
	if s.Broken {
		m = BrokenMarker
	}
	return fmt.Sprintf("%s version=%s\n", m, s.Version)
}

// randomShare is the part of an image that does not compress (binaries);
// the rest is repetitive like a root filesystem's text and free space, so
// compression has something to show.
const randomShare = 4

// WriteImage writes the image spec describes to w.
func WriteImage(w io.Writer, spec ImageSpec) error {
	h := spec.header()
	if spec.Size < int64(len(h)) {
		return fmt.Errorf("demo image %s: size %d is smaller than its header", spec.Version, spec.Size)
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	if _, err := io.WriteString(bw, h); err != nil {
		return fmt.Errorf("demo image %s: %w", spec.Version, err)
	}
	left := spec.Size - int64(len(h))
	random := left / randomShare
	var seed [32]byte
	for i := range 8 {
		seed[i] = byte(spec.Seed >> (8 * i))
	}
	if _, err := io.CopyN(bw, rand.NewChaCha8(seed), random); err != nil {
		return fmt.Errorf("demo image %s: %w", spec.Version, err)
	}
	left -= random
	for i := 0; left > 0; i++ {
		line := fmt.Sprintf("/usr/share/demo/file-%07d version=%s ok\n", i, spec.Version)
		n := min(int64(len(line)), left)
		if _, err := io.WriteString(bw, line[:n]); err != nil {
			return fmt.Errorf("demo image %s: %w", spec.Version, err)
		}
		left -= n
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("demo image %s: %w", spec.Version, err)
	}
	return nil
}

// WriteImageFile writes the image to a new file at path and returns its
// SHA-256 (hex), what an offer of it names.
func WriteImageFile(path string, spec ImageSpec) (sum string, err error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return "", fmt.Errorf("demo image: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("demo image %s: %w", path, cerr)
		}
		if err != nil {
			_ = os.Remove(path) // best effort: no half image left behind
		}
	}()
	h := sha256.New()
	if err := WriteImage(io.MultiWriter(f, h), spec); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// WriteVariantFile writes to path the image at base with spec's header and
// a few scattered chunks of chunkSize changed, as the next release of a root
// filesystem differs from the last; it returns the image's SHA-256 and how
// many chunks differ from base's.
func WriteVariantFile(path, base string, spec ImageSpec, chunkSize int64) (sum string, changed int, err error) {
	b, err := os.ReadFile(base)
	if err != nil {
		return "", 0, fmt.Errorf("demo image %s: %w", spec.Version, err)
	}
	copy(b, spec.header())
	n := (int64(len(b)) + chunkSize - 1) / chunkSize
	note := fmt.Sprintf("changed in %s\n", spec.Version)
	for _, c := range []int64{n / 3, 2 * n / 3} {
		if c > 0 {
			copy(b[c*chunkSize+100:], note)
		}
	}
	chunks := 1 + min(2, int(n-1)) // the header's and the two above
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return "", 0, fmt.Errorf("demo image %s: %w", spec.Version, err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:]), chunks, nil
}
