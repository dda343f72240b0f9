package slots

import (
	"fmt"
	"io"

	"github.com/otad/otad/ota"
)

// Target is the inactive slot a write goes to. File, a block device or a
// regular file, gets the writer's full pipeline: large aligned writes,
// writeback steered as it goes, a read-back from storage. Any other target
// (the simulator's slots in memory) is written through Open's Writer.
type Target interface {
	// Name is how messages call the slot.
	Name() string
	// Capacity is how many bytes the slot holds.
	Capacity() (int64, error)
	// Open claims the slot for one write of an image of size bytes; what it
	// held is gone from then on.
	Open(size int64) (Writer, error)
}

// Writer is a Target open for one write.
type Writer interface {
	io.WriterAt
	// ReaderAt reads the slot back, once Commit has returned.
	io.ReaderAt
	// Commit is called once the whole image is written and matched sha256:
	// it makes the image durable; the slot holds the image named sha256.
	Commit(sha256 string) error
	// Close ends the write; without a Commit the slot holds no image.
	Close() error
}

// sink is where Write puts the image: a File (target), or another Target's
// Writer (writerSink).
type sink interface {
	// writev writes iov's buffers one after another from off, all of
	// them or an error.
	writev(iov [][]byte, off int64) error
	// flusher makes written regions durable as the writer goes, publishing
	// how far they are, so the readback knows what it may read.
	flusher(lag int64, publish func(durable int64)) flusher
	// reader opens the slot for the readback: read fills one request;
	// direct says reads come from storage, not a cache.
	reader(noDirect bool, probe []byte) (read func(*readReq), direct bool, closeRead func() error, err error)
	close() error
}

// flusher is the writer's durability: advance after each chunk, finish once
// the whole image is written and hashed.
type flusher interface {
	advance(end int64) error
	finish(size int64) error
}

// openSink opens the job's slot for writing and checks the image fits.
func openSink(job *Job, tun *tuning) (sink, error) {
	tooBig := func(capacity int64) error {
		return ota.Wrap(ota.CodeSizeMismatch, fmt.Errorf("slot %s holds %d bytes, payload %s is %d bytes", job.targetName(), capacity, job.URL, job.Size))
	}
	if f, ok := job.Target.(File); ok {
		t, err := openTarget(string(f), job.bootedPath(), tun.mountinfo)
		if err != nil {
			return nil, err
		}
		if t.size < job.Size {
			t.close()
			return nil, tooBig(t.size)
		}
		return openDirect(t, tun.bufferedWrite), nil
	}
	capacity, err := job.Target.Capacity()
	if err != nil {
		return nil, ota.Wrap(ota.CodeWriteFailed, fmt.Errorf("slot %s: %w", job.targetName(), err))
	}
	if capacity < job.Size {
		return nil, tooBig(capacity)
	}
	w, err := job.Target.Open(job.Size)
	if err != nil {
		if ota.CodeOf(err) == "" {
			err = ota.Wrap(ota.CodeWriteFailed, fmt.Errorf("slot %s: %w", job.targetName(), err))
		}
		return nil, err
	}
	*tun = tun.small()
	return &writerSink{w: w, sha256: job.SHA256}, nil
}

// small is the pipeline for a target that is not a File: two 256 KiB
// buffers and one for the readback instead of 2 MiB. The large ones keep
// storage busy; a Writer has no writeback to steer and no cache to bypass,
// and a simulated fleet runs many installs at once.
func (t tuning) small() tuning {
	t.chunk, t.buffers, t.rbBuffers, t.readChunk, t.readBufs = 256<<10, 2, 0, 256<<10, 1
	return t
}

func (t *target) writev(iov [][]byte, off int64) error { return pwritev(t.f, iov, off) }

func (t *target) flusher(lag int64, publish func(int64)) flusher {
	return &syncer{fd: int(t.f.Fd()), name: t.path, lag: lag, rangeOK: true, publish: publish}
}

func (t *target) reader(noDirect bool, probe []byte) (func(*readReq), bool, func() error, error) {
	f, direct, err := openReadback(t, noDirect, probe)
	if err != nil {
		return nil, false, nil, err
	}
	return func(r *readReq) { readRegion(f, direct, r) }, direct, f.Close, nil
}

// writerSink writes a Target through its Writer. The readback may read
// only once the whole image is written and its hash checked (Commit), as
// with a file, whose last region becomes durable only then: else a wrong
// image would end as readback_mismatch rather than hash_mismatch.
type writerSink struct {
	w      Writer
	sha256 string
}

func (s *writerSink) writev(iov [][]byte, off int64) error { return writeEach(s.w, iov, off) }

// writeEach writes iov one buffer at a time, for a Writer, which has no
// vectored write.
func writeEach(w io.WriterAt, iov [][]byte, off int64) error {
	for _, b := range iov {
		if _, err := w.WriteAt(b, off); err != nil {
			return err
		}
		off += int64(len(b))
	}
	return nil
}

func (s *writerSink) flusher(_ int64, publish func(int64)) flusher {
	return commitFlusher{s: s, publish: publish}
}

func (s *writerSink) reader(bool, []byte) (func(*readReq), bool, func() error, error) {
	read := func(r *readReq) {
		defer close(r.done)
		r.got, r.err = s.w.ReadAt(r.buf[:r.n], r.off)
	}
	return read, true, func() error { return nil }, nil
}

func (s *writerSink) close() error { return s.w.Close() }

type commitFlusher struct {
	s       *writerSink
	publish func(int64)
}

func (f commitFlusher) advance(int64) error { return nil }

func (f commitFlusher) finish(size int64) error {
	if err := f.s.w.Commit(f.s.sha256); err != nil {
		return ota.Wrap(ota.CodeWriteFailed, fmt.Errorf("commit %s: %w", f.s.sha256, err))
	}
	f.publish(size)
	return nil
}

var (
	_ sink = (*target)(nil)
	_ sink = (*writerSink)(nil)
)
