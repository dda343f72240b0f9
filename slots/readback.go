package slots

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/otad/otad/ota"
)

// readReq is one readback read in flight.
type readReq struct {
	off, n int64
	buf    []byte
	got    int
	err    error
	done   chan struct{}
}

// readQueue reads a slot back in order with one read in flight per free
// buffer, so the device is busy while the previous region is hashed (a
// single synchronous O_DIRECT read leaves it idle). Both writers read back
// through it.
type readQueue struct {
	read   func(*readReq)
	target string // the slot, for errors
	free   [][]byte
	queue  []*readReq
	issued int64 // bytes asked for
}

// issue starts reads of the next regions, up to limit, while buffers are
// free; before, when not nil, sees each read as it starts.
func (q *readQueue) issue(limit int64, before func(off, n int64)) {
	for len(q.free) > 0 && q.issued < limit {
		buf := q.free[0]
		q.free = q.free[1:]
		r := &readReq{off: q.issued, n: min(limit, q.issued+int64(len(buf))) - q.issued, buf: buf, done: make(chan struct{})}
		if before != nil {
			before(r.off, r.n)
		}
		q.queue = append(q.queue, r)
		q.issued += r.n
		go q.read(r)
	}
}

// next waits for the oldest read; one that came back short is
// readback_mismatch. Hand its buffer back with release.
func (q *readQueue) next(ctx context.Context) (*readReq, error) {
	r := q.queue[0]
	select {
	case <-r.done:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	q.queue = q.queue[1:]
	if int64(r.got) < r.n {
		err := r.err
		if err == nil {
			err = fmt.Errorf("short read (%d of %d bytes)", r.got, r.n)
		}
		return nil, ota.Wrap(ota.CodeReadbackMismatch, fmt.Errorf("read back %s at offset %d: %w", q.target, r.off, err))
	}
	return r, nil
}

func (q *readQueue) release(r *readReq) { q.free = append(q.free, r.buf) }

// wait returns once no read is in flight: every read must end before the
// buffers are unmapped.
func (q *readQueue) wait() {
	for _, r := range q.queue {
		<-r.done
	}
}

// readback hashes the slot's storage again, trailing the writer: it reads
// each region once the writer has synced it, so verifying overlaps writing and
// only the last few MiB are read after the final fdatasync.
func (p *pipeline) readback(ctx context.Context) (err error) {
	read, direct, closeRead, err := p.out.reader(p.tun.noDirect, p.readBufs[0])
	if err != nil {
		return err
	}
	defer closeRead()
	p.direct.Store(direct)
	q := &readQueue{read: read, target: p.job.targetName(), free: append([][]byte(nil), p.readBufs...)}
	defer q.wait()
	var before func(off, n int64)
	if p.tun.beforeReadback != nil {
		before = func(off, n int64) { p.tun.beforeReadback(off, n, direct) }
	}
	h := sha256.New()
	for hashed := int64(0); hashed < p.job.Size; {
		if err := ctx.Err(); err != nil {
			return context.Cause(ctx)
		}
		q.issue(p.durable.Load(), before)
		if len(q.queue) == 0 {
			select {
			case <-p.durableCh:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
			continue
		}
		r, err := q.next(ctx)
		if err != nil {
			return err
		}
		h.Write(r.buf[:r.n])
		hashed += r.n
		p.readDone.Store(hashed)
		q.release(r)
	}
	if sum := h.Sum(nil); !bytes.Equal(sum, p.expected) {
		return ota.Wrap(ota.CodeReadbackMismatch, fmt.Errorf("slot %s read back has sha256 %x, manifest says %s", p.job.targetName(), sum, strings.ToLower(p.job.SHA256)))
	}
	return nil
}

func readRegion(f *os.File, direct bool, r *readReq) {
	defer close(r.done)
	if !direct {
		// Without O_DIRECT, drop the (clean, synced) cached pages first so
		// that the read has to come from storage.
		_ = unix.Fadvise(int(f.Fd()), r.off, r.n, unix.FADV_DONTNEED)
	}
	// O_DIRECT wants aligned lengths: the read may run past the image into
	// the rest of the slot, or stop short at the end of a file.
	r.got, r.err = f.ReadAt(r.buf[:roundUp(r.n, alignment)], r.off)
	if !direct {
		// Keep the cache as it was: the image is not needed there.
		_ = unix.Fadvise(int(f.Fd()), r.off, r.n, unix.FADV_DONTNEED)
	}
}

// openReadback opens the very file being written (through /proc/self/fd, so
// a path swapped meanwhile cannot fool it) for reading, with O_DIRECT where
// the filesystem supports it. tmpfs and some FUSE filesystems refuse O_DIRECT
// at open or at the first read; then reads are buffered and each region's
// cached pages are dropped right before it is read (see readRegion).
func openReadback(t *target, noDirect bool, probe []byte) (*os.File, bool, error) {
	paths := []string{"/proc/self/fd/" + strconv.Itoa(int(t.f.Fd())), t.f.Name()}
	var lastErr error
	for _, path := range paths {
		if !noDirect {
			fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
			if err == nil {
				f := os.NewFile(uintptr(fd), t.f.Name())
				if directReadWorks(f, probe) {
					return f, true, nil
				}
				f.Close()
			} else if !errors.Is(err, unix.EINVAL) {
				lastErr = err
				continue
			}
		}
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			return os.NewFile(uintptr(fd), t.f.Name()), false, nil
		}
		lastErr = err
	}
	return nil, false, ota.Wrap(ota.CodeWriteFailed, fmt.Errorf("open %s to read it back: %w", t.path, lastErr))
}

// directReadWorks probes one aligned block: some filesystems accept O_DIRECT
// at open and refuse it (EINVAL) at the first read.
func directReadWorks(f *os.File, buf []byte) bool {
	_, err := unix.Pread(int(f.Fd()), buf[:alignment], 0)
	return !errors.Is(err, unix.EINVAL)
}
