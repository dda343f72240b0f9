package slots

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

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

// mountedAt returns a mount point of the block device rdev, or of one of its
// partitions, from a mountinfo file; "" when none is mounted.
func mountedAt(mountinfo string, rdev uint64) (string, error) {
	devs := map[string]bool{devString(rdev): true}
	// Partitions of a whole disk live in sysfs under the disk's directory.
	sysDir := filepath.Join("/sys/dev/block", devString(rdev))
	if entries, err := os.ReadDir(sysDir); err == nil {
		for _, e := range entries {
			if b, err := os.ReadFile(filepath.Join(sysDir, e.Name(), "dev")); err == nil {
				devs[strings.TrimSpace(string(b))] = true
			}
		}
	}
	f, err := os.Open(mountinfo)
	if err != nil {
		return "", fmt.Errorf("check mounts: %w", err)
	}
	defer f.Close()
	mp, err := findMount(f, devs)
	if err != nil {
		return "", fmt.Errorf("check mounts in %s: %w", mountinfo, err)
	}
	return mp, nil
}

// findMount scans mountinfo lines ("36 35 98:0 /root /mnt rw - ext4 ...")
// for a mount of one of devs ("major:minor").
func findMount(r io.Reader, devs map[string]bool) (string, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		if devs[fields[2]] {
			return fields[2] + " on " + unescapeMount(fields[4]), nil
		}
	}
	return "", sc.Err()
}

// unescapeMount undoes the octal escapes (\040 for space) of mountinfo paths.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func devString(rdev uint64) string {
	return fmt.Sprintf("%d:%d", unix.Major(rdev), unix.Minor(rdev))
}
