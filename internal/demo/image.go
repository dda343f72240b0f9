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
