package durable

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// FS is the file system the files are replaced on. OS, the operating
// system's, is otad's; a crash-state explorer puts a recorder in its place
// to see each write, sync, rename and directory sync, in order
// (internal/testkit/crashstate).
type FS interface {
	CreateTemp(dir, pattern string) (File, error)
	Rename(oldpath, newpath string) error
	Remove(name string) error
	// SyncDir makes the creations, renames and removals in dir durable.
	SyncDir(dir string) error
}

// File is a temporary file being written.
type File interface {
	io.Writer
	Name() string
	Chmod(mode os.FileMode) error
	Sync() error
	Close() error
}

// OS is the operating system's file system.
type OS struct{}

// CreateTemp is os.CreateTemp.
func (OS) CreateTemp(dir, pattern string) (File, error) { return os.CreateTemp(dir, pattern) }

// Rename is os.Rename.
func (OS) Rename(oldpath, newpath string) error { return os.Rename(oldpath, newpath) }

// Remove is os.Remove.
func (OS) Remove(name string) error { return os.Remove(name) }

// SyncDir fsyncs the directory.
func (OS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// WriteFile replaces path with data on the operating system's file system:
// WriteFileOn with OS.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	return WriteFileOn(OS{}, path, data, perm)
}

// WriteFileOn replaces path with data on fsys (nil: OS): temp file in the
// same directory, fsync, rename, fsync of the directory. Readers and
// crashes see the old or the new content, never a mix.
func WriteFileOn(fsys FS, path string, data []byte, perm os.FileMode) error {
	if fsys == nil {
		fsys = OS{}
	}
	dir := filepath.Dir(path)
	f, err := fsys.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	renamed := false
	defer func() {
		if !renamed {
			_ = fsys.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return fmt.Errorf("chmod %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("fsync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp, err)
	}
	if err := fsys.Rename(tmp, path); err != nil {
		return fmt.Errorf("rename %s: %w", path, err)
	}
	renamed = true
	if err := fsys.SyncDir(dir); err != nil {
		return fmt.Errorf("fsync dir %s: %w", dir, err)
	}
	return nil
}

// Remove deletes path (a missing file is fine) and syncs its directory, so
// the removal survives a power cut too.
func Remove(path string) error { return RemoveOn(OS{}, path) }

// RemoveOn is Remove on fsys (nil: OS).
func RemoveOn(fsys FS, path string) error {
	if fsys == nil {
		fsys = OS{}
	}
	if err := fsys.Remove(path); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	if err := fsys.SyncDir(filepath.Dir(path)); err != nil {
		return fmt.Errorf("fsync dir %s: %w", filepath.Dir(path), err)
	}
	return nil
}
