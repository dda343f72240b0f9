package bootctl

import "os"

// Disk is how a backend writes its environment: WriteAt, then Sync. The
// backends' power-cut tests replace them to stop the power mid-write, and
// the crash-state explorer to record what reaches storage when (WithDisk).
type Disk struct {
	WriteAt func(f *os.File, b []byte, off int64) (int, error)
	Sync    func(f *os.File) error
}

// OSDisk writes through the operating system.
func OSDisk() Disk { return Disk{WriteAt: (*os.File).WriteAt, Sync: (*os.File).Sync} }
