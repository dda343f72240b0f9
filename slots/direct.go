package slots

import (
	"errors"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// The stream writer writes a File slot with O_DIRECT where the slot takes
// it (docs/design.md, "Writing a slot"): the pipeline's buffers go to
// storage without a copy into the page cache, and a write that returns is
// on storage, so there is no writeback to start, wait for and drop chunk by
// chunk (sync_file_range twice and fadvise per chunk cost a third of the
// install's speed with small chunks, issue 33). The one fdatasync at the end
// flushes the device's write cache. Where O_DIRECT is refused (tmpfs, some
// FUSE filesystems) the writes go through the page cache, steered by the
// syncer as before.

// directTarget is a target with a second descriptor opened with O_DIRECT
// for the aligned part of each write.
type directTarget struct {
	*target
	direct *os.File // nil: buffered writes
	wrote  bool     // a direct write has succeeded
}

// openDirect opens the very file t has open (through /proc/self/fd, as
// the readback does) again with O_DIRECT; without it, writes are buffered.
func openDirect(t *target, buffered bool) *directTarget {
	d := &directTarget{target: t}
	if buffered {
		return d
	}
	for _, path := range []string{"/proc/self/fd/" + strconv.Itoa(int(t.f.Fd())), t.f.Name()} {
		fd, err := unix.Open(path, unix.O_WRONLY|unix.O_DIRECT|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
		if err == nil {
			d.direct = os.NewFile(uintptr(fd), t.f.Name())
			return d
		}
	}
	return d
}

// WriteAt writes b's aligned part with O_DIRECT and the rest (the image's
// last partial block) through the page cache, which the final fdatasync
// flushes.
func (d *directTarget) WriteAt(b []byte, off int64) (int, error) {
	if err := d.writev([][]byte{b}, off); err != nil {
		return 0, err
	}
	return len(b), nil
}

// writev writes iov with one O_DIRECT pwritev where every buffer but the
// last is whole blocks, the last one's partial block (the image's end)
// through the page cache. A slot that refuses the first direct write
// (EINVAL at the write, not at open, on some filesystems) is written
// buffered from then on.
func (d *directTarget) writev(iov [][]byte, off int64) error {
	last := len(iov) - 1
	n := len(iov[last]) / alignment * alignment
	aligned := d.direct != nil && off%alignment == 0
	for _, b := range iov[:last] {
		aligned = aligned && len(b)%alignment == 0
	}
	if !aligned || (last == 0 && n == 0) {
		return pwritev(d.f, iov, off)
	}
	tail := iov[last][n:]
	var size int64
	for _, b := range iov[:last] {
		size += int64(len(b))
	}
	direct := append(iov[:last:last], iov[last][:n])
	if n == 0 {
		direct = direct[:last]
	}
	if err := pwritev(d.direct, direct, off); err != nil {
		if !d.wrote && errors.Is(err, unix.EINVAL) {
			d.direct.Close()
			d.direct = nil
			return pwritev(d.f, iov, off)
		}
		return err
	}
	d.wrote = true
	if len(tail) == 0 {
		return nil
	}
	return pwritev(d.f, [][]byte{tail}, off+size+int64(n))
}

func (d *directTarget) flusher(lag int64, publish func(int64)) flusher {
	return &directFlusher{d: d, s: syncer{fd: int(d.f.Fd()), name: d.path, lag: lag, rangeOK: true, publish: publish}}
}

func (d *directTarget) close() error {
	if d.direct != nil {
		d.direct.Close()
	}
	return d.target.close()
}

// directFlusher publishes what O_DIRECT wrote as durable as far as the
// page cache goes (a returned write is on storage), one chunk behind the
// writer: the image's last chunk only once finish has run, after its hash
// matched, so the readback never reports a wrong image as
// readback_mismatch rather than hash_mismatch. Buffered writes go through
// the syncer.
type directFlusher struct {
	d    *directTarget
	s    syncer
	prev int64 // end of the previous chunk written
}

func (f *directFlusher) advance(end int64) error {
	if f.d.direct == nil {
		return f.s.advance(end)
	}
	if f.prev > f.s.waited {
		f.s.waited = f.prev
		f.s.publish(f.prev)
	}
	f.prev = end
	return nil
}

func (f *directFlusher) finish(size int64) error { return f.s.finish(size) }

var _ sink = (*directTarget)(nil)
