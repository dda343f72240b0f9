package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// peer is one other tool's update of the pair: what it would send.
type peer struct {
	Name  string
	Bytes int64
	Took  time.Duration // making the patch
}

// xdelta3Window is xdelta3's -B: the source window, the whole old image (up
// to xdelta3's 2 GiB), so that a file the new build put elsewhere is found
// wherever it lies.
func xdelta3Window(size int64) int64 {
	return min(max(size, 1<<20), 1<<31)
}

// xdelta3Peer makes `xdelta3 -9` of the pair and checks that it decodes to NEW.
func xdelta3Peer(ctx context.Context, r runner, dir string, p imagePair, oldSize int64, newSHA string) (peer, error) {
	patch := filepath.Join(dir, p.name+".xdelta3")
	window := strconv.FormatInt(xdelta3Window(oldSize), 10)
	start := time.Now()
	if err := r.run(ctx, time.Hour, "xdelta3", "-e", "-9", "-f", "-B", window, "-s", p.old, p.new, patch); err != nil {
		return peer{}, err
	}
	took := time.Since(start)
	if err := checkDecodes(ctx, r, newSHA, "xdelta3", "-d", "-c", "-B", window, "-s", p.old, patch); err != nil {
		return peer{}, err
	}
	return patchPeer("xdelta3 -9 -B "+sizeName(xdelta3Window(oldSize)), patch, took)
}

// zstdPeer makes `zstd --patch-from=OLD` at level, with a window over the
// whole old image, and checks that it decodes to NEW.
func zstdPeer(ctx context.Context, r runner, dir string, p imagePair, oldSize int64, level int, newSHA string) (peer, error) {
	patch := filepath.Join(dir, p.name+".zst-patch")
	long := "--long=" + strconv.Itoa(windowLog(oldSize))
	args := []string{"-q", "-f", "-" + strconv.Itoa(level), long, "--patch-from=" + p.old, p.new, "-o", patch}
	if level > 19 {
		args = append([]string{"--ultra"}, args...)
	}
	start := time.Now()
	if err := r.run(ctx, time.Hour, "zstd", args...); err != nil {
		return peer{}, err
	}
	took := time.Since(start)
	if err := checkDecodes(ctx, r, newSHA, "zstd", "-q", "-d", "-c", long, "--patch-from="+p.old, patch); err != nil {
		return peer{}, err
	}
	return patchPeer(fmt.Sprintf("zstd -%d %s --patch-from", level, long), patch, took)
}

// windowLog is the log2 of the smallest power of two that covers size,
// within zstd's 10 to 31.
func windowLog(size int64) int {
	w := 10
	for w < 31 && int64(1)<<w < size {
		w++
	}
	return w
}

func patchPeer(name, patch string, took time.Duration) (peer, error) {
	st, err := os.Stat(patch)
	if err != nil {
		return peer{}, err
	}
	return peer{Name: name, Bytes: st.Size(), Took: took}, nil
}

// checkDecodes runs a decoder writing to stdout and checks that it gives NEW.
func checkDecodes(ctx context.Context, r runner, want string, name string, args ...string) error {
	h := sha256.New()
	if _, err := r.output(ctx, time.Hour, h, name, args...); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return fmt.Errorf("%s's patch decodes to sha256 %s, not the new image's %s", name, got, want)
	}
	return nil
}
