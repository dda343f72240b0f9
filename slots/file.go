package slots

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/otad/otad/ota"
)

// Capacity returns how many bytes the slot at path holds: the size of a block device (BLKGETSIZE64) or of
// a regular file (slots are regular files in tests and the demo).
func Capacity(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("slot size: %w", err)
	}
	defer f.Close()
	return fileSize(f)
}

func fileSize(f *os.File) (int64, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return 0, fmt.Errorf("slot size: stat %s: %w", f.Name(), err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return st.Size, nil
	case unix.S_IFBLK:
		n, err := unix.IoctlGetUint64(int(f.Fd()), unix.BLKGETSIZE64)
		if err != nil {
			return 0, fmt.Errorf("slot size: BLKGETSIZE64 on %s: %w", f.Name(), err)
		}
		return int64(n), nil
	}
	return 0, fmt.Errorf("slot size: %s is neither a block device nor a regular file", f.Name())
}

// File is a slot that is a block device, or a regular file (tests, the
// demo): its path. Write refuses it while it is the booted slot or mounted.
type File string

// Name is the path.
func (f File) Name() string { return string(f) }

// Capacity is Capacity(path).
func (f File) Capacity() (int64, error) { return Capacity(string(f)) }

// Open opens the slot for a writer other than Write and WriteChunked (which
// open it themselves, with the booted slot to refuse): writes go straight to
// the slot, ReadAt reads it back through the page cache, Commit is
// fdatasync. A mounted device is refused.
func (f File) Open(size int64) (Writer, error) {
	t, err := openTarget(string(f), "", defaultMountinfo)
	if err != nil {
		return nil, err
	}
	if t.size < size {
		t.close()
		return nil, ota.Wrap(ota.CodeSizeMismatch, fmt.Errorf("slot %s holds %d bytes, the image is %d bytes", f, t.size, size))
	}
	rd, _, err := openReadback(t, true, nil)
	if err != nil {
		t.close()
		return nil, err
	}
	return &fileWriter{t: t, rd: rd}, nil
}

// fileWriter is File's Writer.
type fileWriter struct {
	t  *target
	rd *os.File
}

func (w *fileWriter) WriteAt(b []byte, off int64) (int, error) { return w.t.f.WriteAt(b, off) }
func (w *fileWriter) ReadAt(b []byte, off int64) (int, error)  { return w.rd.ReadAt(b, off) }
func (w *fileWriter) Commit(string) error                      { return unix.Fdatasync(int(w.t.f.Fd())) }

func (w *fileWriter) Close() error {
	w.rd.Close()
	return w.t.close()
}

// target is the inactive slot, opened for writing.
type target struct {
	f     *os.File
	path  string
	size  int64
	block bool
}

func (t *target) close() error { return t.f.Close() }

// openTarget opens the slot at path for writing, exclusively, after refusing
// the booted slot and mounted devices. It never creates or truncates: a slot
// is a partition (or a pre-made file) that must already exist.
func openTarget(path, booted, mountinfo string) (*target, error) {
	fail := func(format string, a ...any) (*target, error) {
		return nil, ota.Wrap(ota.CodeWriteFailed, fmt.Errorf(format, a...))
	}
	if path == "" {
		return fail("no target slot given")
	}
	resolved, err := filepath.EvalSymlinks(path)
	if err != nil {
		return fail("target slot %s: %w", path, err)
	}
	if booted != "" {
		if b, err := filepath.EvalSymlinks(booted); err == nil && b == resolved {
			return fail("target slot %s is the booted slot %s: refusing to write it", path, booted)
		}
	}
	// O_EXCL on a block device claims it exclusively (EBUSY while mounted or
	// held by another opener); on a regular file it is ignored, hence flock.
	fd, err := unix.Open(resolved, unix.O_WRONLY|unix.O_EXCL|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		if errors.Is(err, unix.EBUSY) {
			return fail("target slot %s is in use (mounted, or opened exclusively by another process): %w", path, err)
		}
		return fail("open target slot %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), resolved)
	t := &target{f: f, path: path}
	ok := false
	defer func() {
		if !ok {
			f.Close()
		}
	}()
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return fail("target slot %s is being written by another process (locked)", path)
		}
		return fail("lock target slot %s: %w", path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fail("stat target slot %s: %w", path, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFBLK:
		t.block = true
	default:
		return fail("target slot %s is neither a block device nor a regular file", path)
	}
	if booted != "" {
		var bst unix.Stat_t
		if err := unix.Stat(booted, &bst); err == nil {
			same := st.Dev == bst.Dev && st.Ino == bst.Ino
			if t.block && bst.Mode&unix.S_IFMT == unix.S_IFBLK && st.Rdev == bst.Rdev {
				same = true
			}
			if same {
				return fail("target slot %s is the booted slot %s: refusing to write it", path, booted)
			}
		}
	}
	if t.block {
		mp, err := mountedAt(mountinfo, st.Rdev)
		if err != nil {
			return fail("target slot %s: %w", path, err)
		}
		if mp != "" {
			return fail("target slot %s is mounted (%s): refusing to write it", path, mp)
		}
	}
	if t.size, err = fileSize(f); err != nil {
		return fail("target slot %s: %w", path, err)
	}
	ok = true
	return t, nil
}
