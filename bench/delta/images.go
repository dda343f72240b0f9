package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// imagePair is one rendering of the pair: the two images a device would
// hold in its slots before and after the update.
type imagePair struct {
	name     string // "ext4", "squashfs", "erofs"
	old, new string // image files
	slotSize int64  // what the device's slots hold: the larger image, rounded up to 1 MiB
}

// Read-only compressed file systems (-ro).
const (
	roSquashfs = "squashfs"
	roErofs    = "erofs"
)

// renderPairs renders both trees as ext4 of size bytes and as the
// read-only file system ro, each side built fresh (mkfs on the tree, as a
// real image build does: files land where this build puts them), into the
// cache's images/, reusing what a previous run rendered.
func renderPairs(ctx context.Context, r runner, cache string, size int64, ro string, out io.Writer) ([]imagePair, error) {
	oldDir, newDir, _ := rootfsDirs(cache)
	dir := filepath.Join(cache, "images")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	ext4 := imagePair{name: "ext4", old: filepath.Join(dir, "old-"+sizeName(size)+".ext4"), new: filepath.Join(dir, "new-"+sizeName(size)+".ext4")}
	rop := imagePair{name: ro, old: filepath.Join(dir, "old."+ro), new: filepath.Join(dir, "new."+ro)}
	for _, p := range []*imagePair{&ext4, &rop} {
		for _, side := range []struct{ root, img string }{{oldDir, p.old}, {newDir, p.new}} {
			if _, err := os.Stat(side.img); err == nil {
				continue
			}
			start := time.Now()
			tmp := side.img + ".tmp"
			_ = os.Remove(tmp)
			var err error
			switch p.name {
			case "ext4":
				err = renderExt4(ctx, r, side.root, tmp, size)
			case roSquashfs:
				err = r.run(ctx, 30*time.Minute, "mksquashfs", side.root, tmp, "-comp", "zstd", "-noappend", "-no-progress", "-quiet")
			case roErofs:
				err = r.run(ctx, 30*time.Minute, "mkfs.erofs", "-zlz4hc", tmp, side.root)
			}
			if err != nil {
				os.Remove(tmp)
				return nil, fmt.Errorf("%s image of %s (log: %s): %w", p.name, side.root, logPath(cache), err)
			}
			if err := os.Rename(tmp, side.img); err != nil {
				return nil, err
			}
			fmt.Fprintf(out, "rendered %s in %v\n", side.img, time.Since(start).Round(time.Millisecond))
		}
		for _, img := range []string{p.old, p.new} {
			st, err := os.Stat(img)
			if err != nil {
				return nil, err
			}
			p.slotSize = max(p.slotSize, (st.Size()+(1<<20)-1)&^(1<<20-1))
		}
	}
	return []imagePair{ext4, rop}, nil
}

// renderExt4 makes an ext4 image of size bytes holding root's files.
func renderExt4(ctx context.Context, r runner, root, img string, size int64) error {
	f, err := os.Create(img)
	if err != nil {
		return err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := r.run(ctx, 30*time.Minute, "mkfs.ext4", "-q", "-F", "-L", "rootfs", "-d", root, img); err != nil {
		return fmt.Errorf("%w (is -size %s too small for the tree?)", err, sizeName(size))
	}
	return nil
}

// sizeName writes a byte count the way -size takes it: 1GiB, 768MiB, 12345.
func sizeName(n int64) string {
	for _, u := range []struct {
		s    string
		unit int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.unit && n%u.unit == 0 {
			return fmt.Sprintf("%d%s", n/u.unit, u.s)
		}
	}
	return fmt.Sprint(n)
}

// fileSHA256 hashes a file.
func fileSHA256(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.CopyBuffer(h, struct{ io.Reader }{f}, make([]byte, 4<<20)) // the buffer, not File.WriteTo's 32 KiB
	if err != nil {
		return "", 0, fmt.Errorf("hash %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}
