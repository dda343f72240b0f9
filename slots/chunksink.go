package slots

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/otad/otad/ota"
)

// Syncer is a Writer that can make what was written so far durable before
// the whole image is, and that keeps what the slot held when it was opened:
// a chunked install checkpoints and resumes on it (WriteChunked).
type Syncer interface {
	Writer
	Sync() error
}

// chunkSink is where a chunked install writes: a File through its own
// pipeline (vectored writes, writeback steered, the slot read back from
// storage), or a Target whose Writer is a Syncer.
type chunkSink interface {
	name() string // what the checkpoint is keyed by
	size() int64
	writev(iov [][]byte, off int64) error
	// directSlot is the slot to write through staging buffers with O_DIRECT
	// (chunkstage.go); nil: writev and flusher.
	directSlot() *directTarget
	flusher(lag int64) flusher
	sync() error
	// read reads n bytes at off into buf (readChunk's rules); readRegion
	// fills one read-back request.
	read(off int64, n int, buf []byte) ([]byte, error)
	readRegion(r *readReq)
	// done is told the image is written and matched its digest.
	done(sha256 string) error
	close() error
}

// openChunkSink opens the job's slot for a chunked install.
func openChunkSink(job *ChunkedJob, tun *tuning, probe []byte) (chunkSink, error) {
	if f, ok := job.Target.(File); ok {
		t, err := openTarget(string(f), job.bootedPath(), tun.mountinfo)
		if err != nil {
			return nil, err
		}
		rd, direct, err := openReadback(t, tun.noDirect, probe)
		if err != nil {
			t.close()
			return nil, err
		}
		return &fileSink{t: t, d: openDirect(t, tun.bufferedWrite), rd: rd, direct: direct, slot: job.targetName()}, nil
	}
	capacity, err := job.Target.Capacity()
	if err != nil {
		return nil, ota.Wrap(ota.CodeWriteFailed, fmt.Errorf("slot %s: %w", job.targetName(), err))
	}
	w, err := job.Target.Open(job.Size)
	if err != nil {
		if ota.CodeOf(err) == "" {
			err = ota.Wrap(ota.CodeWriteFailed, fmt.Errorf("slot %s: %w", job.targetName(), err))
		}
		return nil, err
	}
	s, ok := w.(Syncer)
	if !ok {
		w.Close()
		return nil, ota.Wrap(ota.CodeWriteFailed, fmt.Errorf("slot %s: a chunked payload needs a slot it can sync as it goes (a slot file, a block device)", job.targetName()))
	}
	return &syncSink{w: s, slot: job.targetName(), capacity: capacity}, nil
}

// fileSink is a File opened for a chunked install, and opened again for
// reading (O_DIRECT where it works).
type fileSink struct {
	t      *target
	d      *directTarget // t, and t opened again with O_DIRECT where it may be
	rd     *os.File
	direct bool
	slot   string
}

func (s *fileSink) name() string { return s.t.f.Name() }
func (s *fileSink) size() int64  { return s.t.size }

func (s *fileSink) writev(iov [][]byte, off int64) error { return pwritev(s.t.f, iov, off) }

// directSlot is the slot for the stager: directTarget writes through the page
// cache where O_DIRECT is refused, and its flusher steers writeback then.
func (s *fileSink) directSlot() *directTarget { return s.d }

func (s *fileSink) flusher(lag int64) flusher {
	return &syncer{fd: int(s.t.f.Fd()), name: s.slot, lag: lag, rangeOK: true, publish: func(int64) {}}
}

func (s *fileSink) sync() error { return unix.Fdatasync(int(s.t.f.Fd())) }

func (s *fileSink) read(off int64, n int, buf []byte) ([]byte, error) {
	return readChunk(s.rd, s.direct, off, n, buf)
}

func (s *fileSink) readRegion(r *readReq) { readRegion(s.rd, s.direct, r) }
func (s *fileSink) done(string) error     { return nil }

func (s *fileSink) close() error {
	s.rd.Close()
	return s.d.close()
}

// syncSink is another Target's Writer that can sync.
type syncSink struct {
	w        Syncer
	slot     string
	capacity int64
}

func (s *syncSink) name() string { return s.slot }
func (s *syncSink) size() int64  { return s.capacity }

func (s *syncSink) writev(iov [][]byte, off int64) error { return writeEach(s.w, iov, off) }

func (s *syncSink) directSlot() *directTarget { return nil }
func (s *syncSink) flusher(int64) flusher     { return syncFlusher{s} }
func (s *syncSink) sync() error               { return s.w.Sync() }

func (s *syncSink) read(off int64, n int, buf []byte) ([]byte, error) {
	if _, err := s.w.ReadAt(buf[:n], off); err != nil {
		return nil, fmt.Errorf("read %d bytes at offset %d of %s: %w", n, off, s.slot, err)
	}
	return buf[:n], nil
}

func (s *syncSink) readRegion(r *readReq) {
	defer close(r.done)
	r.got, r.err = s.w.ReadAt(r.buf[:r.n], r.off)
}

func (s *syncSink) done(sha256 string) error { return s.w.Commit(sha256) }
func (s *syncSink) close() error             { return s.w.Close() }

// syncFlusher makes the image durable at the end; checkpoints sync on
// their own (commitLoop).
type syncFlusher struct{ s *syncSink }

func (f syncFlusher) advance(int64) error { return nil }

func (f syncFlusher) finish(int64) error {
	if err := f.s.w.Sync(); err != nil {
		return ota.Wrap(ota.CodeWriteFailed, fmt.Errorf("sync %s: %w", f.s.slot, err))
	}
	return nil
}
