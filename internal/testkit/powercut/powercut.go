// Package powercut stops the power in the middle of a write, for the
// bootloader backends' power-cut tests: a bootctl.Disk whose writes reach the
// disk only in part, and the restore of a file between two cuts.
package powercut

import (
	"errors"
	"os"
	"testing"

	"github.com/otad/otad/bootctl"
)

// ErrPowerCut is what a torn write returns.
var ErrPowerCut = errors.New("power cut")

// Torn is a disk on which only the first n bytes of each write land before
// the power goes (ErrPowerCut). It never fsyncs: the tests cut thousands of
// writes.
func Torn(n int) bootctl.Disk {
	return bootctl.Disk{
		WriteAt: func(f *os.File, b []byte, off int64) (int, error) {
			w, err := f.WriteAt(b[:n], off)
			if err != nil {
				return w, err
			}
			return w, ErrPowerCut
		},
		Sync: NoSync,
	}
}

// NoSync is a Disk.Sync that skips the fsync.
func NoSync(*os.File) error { return nil }

// Restore puts b back at the start of path without truncating the file:
// ext4 flushes files replaced by truncation, which makes thousands of
// restores slow.
func Restore(t testing.TB, path string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err == nil {
		_, err = f.WriteAt(b, 0)
		f.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
}
