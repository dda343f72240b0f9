package slots

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/otad/otad/ota"
)

// syncer keeps the dirty part of the page cache small while writing: each
// written chunk's writeback starts at once (sync_file_range WRITE), the region
// lag bytes behind the head is waited for and dropped from the cache
// (POSIX_FADV_DONTNEED), so a 1 GiB image neither fills the cache nor ends in
// one long fsync, and the readback knows which regions are on storage.
type syncer struct {
	fd      int
	name    string
	lag     int64
	started int64 // writeback started up to here
	waited  int64 // writeback finished up to here
	rangeOK bool  // sync_file_range works on this fd
	publish func(durable int64)
}

const waitFlags = unix.SYNC_FILE_RANGE_WAIT_BEFORE | unix.SYNC_FILE_RANGE_WRITE | unix.SYNC_FILE_RANGE_WAIT_AFTER

func (s *syncer) advance(end int64) error {
	if s.rangeOK {
		if err := unix.SyncFileRange(s.fd, s.started, end-s.started, unix.SYNC_FILE_RANGE_WRITE); err != nil {
			if !unsupported(err) {
				return ota.Wrap(ota.CodeWriteFailed, fmt.Errorf("start writeback of %s at offset %d: %w", s.name, s.started, err))
			}
			s.rangeOK = false
		}
		s.started = end
	}
	// Aligned, because the readback reads up to here with O_DIRECT.
	upTo := (end - s.lag) / alignment * alignment
	if upTo <= s.waited {
		return nil
	}
	return s.wait(upTo)
}

// wait makes [waited, upTo) durable as far as the page cache goes.
func (s *syncer) wait(upTo int64) error {
	var err error
	if s.rangeOK {
		err = unix.SyncFileRange(s.fd, s.waited, upTo-s.waited, waitFlags)
		if err != nil && unsupported(err) {
			s.rangeOK = false
		}
	}
	if !s.rangeOK {
		err = unix.Fdatasync(s.fd)
	}
	if err != nil {
		return ota.Wrap(ota.CodeWriteFailed, fmt.Errorf("sync %s up to offset %d: %w", s.name, upTo, err))
	}
	// Clean pages only: dropping them keeps the cache for the running system.
	_ = unix.Fadvise(s.fd, s.waited, upTo-s.waited, unix.FADV_DONTNEED)
	s.waited = upTo
	s.publish(upTo)
	return nil
}

// finish flushes everything, including the device's write cache, and marks
// the whole image durable.
func (s *syncer) finish(size int64) error {
	if err := unix.Fdatasync(s.fd); err != nil {
		return ota.Wrap(ota.CodeWriteFailed, fmt.Errorf("fdatasync %s: %w", s.name, err))
	}
	if size > s.waited {
		_ = unix.Fadvise(s.fd, s.waited, size-s.waited, unix.FADV_DONTNEED)
	}
	s.waited = size
	s.publish(size)
	return nil
}

func unsupported(err error) bool {
	return errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL) ||
		errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ESPIPE)
}
