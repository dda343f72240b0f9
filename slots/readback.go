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

// readback hashes the slot's storage again, trailing the writer: it reads
// each region once the writer has synced it, so verifying overlaps writing and
// only the last few MiB are read after the final fdatasync. Several reads are
// in flight at once (one per readback buffer) because a single synchronous
// O_DIRECT read leaves the device idle while the previous one is hashed.
func (p *pipeline) readback(ctx context.Context) (err error) {
	read, direct, closeRead, err := p.out.reader(p.tun.noDirect, p.readBufs[0])
	if err != nil {
		return err
	}
	defer closeRead()
	p.direct.Store(direct)
	free := append([][]byte(nil), p.readBufs...)
	var queue []*readReq
	// Every read must end before the buffers are unmapped.
	defer func() {
		for _, r := range queue {
			<-r.done
		}
	}()
	h := sha256.New()
	size := p.job.Size
	var issued, hashed int64
	for hashed < size {
		if err := ctx.Err(); err != nil {
			return context.Cause(ctx)
		}
		durable := p.durable.Load()
		for len(free) > 0 && issued < durable {
			buf := free[len(free)-1]
			free = free[:len(free)-1]
			r := &readReq{off: issued, n: min(durable, issued+int64(len(buf))) - issued, buf: buf, done: make(chan struct{})}
			if p.tun.beforeReadback != nil {
				p.tun.beforeReadback(r.off, r.n, direct)
			}
			queue = append(queue, r)
			issued += r.n
			go read(r)
		}
		if len(queue) == 0 {
			select {
			case <-p.durableCh:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
			continue
		}
		r := queue[0]
		select {
		case <-r.done:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		queue = queue[1:]
		if int64(r.got) < r.n {
			err := r.err
			if err == nil {
				err = fmt.Errorf("short read (%d of %d bytes)", r.got, r.n)
			}
			return ota.Wrap(ota.CodeReadbackMismatch, fmt.Errorf("read back %s at offset %d: %w", p.job.Target, r.off, err))
		}
		h.Write(r.buf[:r.n])
		hashed += r.n
		p.readDone.Store(hashed)
		free = append(free, r.buf)
	}
	if sum := h.Sum(nil); !bytes.Equal(sum, p.expected) {
		return ota.Wrap(ota.CodeReadbackMismatch, fmt.Errorf("slot %s read back has sha256 %x, manifest says %s", p.job.Target, sum, strings.ToLower(p.job.SHA256)))
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
