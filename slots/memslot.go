package slots

import (
	"fmt"
	"sync"

	"github.com/otad/otad/ota"
)

// MemSlot is a slot that lives in memory, for simulated devices: a fleet of
// thousands in one process keeps no file per slot. At rest it holds only
// what was written last (size and sha256); the image's bytes take memory
// only while a Write has the slot open, for the readback to read, and are
// returned to the system when it ends.
type MemSlot struct {
	name     string
	capacity int64

	mu      sync.Mutex
	writing bool
	size    int64  // the image held, when complete
	sha256  string // its digest; "" after a write that did not complete
}

// NewMemSlot is an empty slot of capacity bytes; name is how messages call it.
func NewMemSlot(name string, capacity int64) *MemSlot {
	return &MemSlot{name: name, capacity: capacity}
}

// Capacity is how many bytes the slot holds.
func (m *MemSlot) Capacity() int64 { return m.capacity }

// Image is the image the last complete Write left in the slot; ok is false
// when none did (never written, or the last write did not complete).
func (m *MemSlot) Image() (size int64, sha256 string, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.size, m.sha256, m.sha256 != ""
}

// open claims the slot for one write; what it held is gone from then on.
func (m *MemSlot) open(job *Job) (sink, error) {
	if job.Size > m.capacity {
		return nil, ota.Wrap(ota.CodeSizeMismatch, fmt.Errorf("slot %s holds %d bytes, payload %s is %d bytes", m.name, m.capacity, job.URL, job.Size))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.writing {
		return nil, ota.Wrap(ota.CodeWriteFailed, fmt.Errorf("slot %s is being written already", m.name))
	}
	// Outside the Go heap, so that the memory is the system's again the
	// moment the install ends (as the pipeline's buffers are).
	bufs, release, err := mapBuffers(1, int(roundUp(job.Size, alignment)))
	if err != nil {
		return nil, ota.Wrap(ota.CodeWriteFailed, fmt.Errorf("slot %s: %w", m.name, err))
	}
	m.writing, m.size, m.sha256 = true, 0, ""
	return &memSink{slot: m, data: bufs[0][:job.Size], release: release, size: job.Size, sha256: job.SHA256}, nil
}

// memSink is a MemSlot open for one write.
type memSink struct {
	slot     *MemSlot
	data     []byte
	release  func()
	size     int64
	sha256   string
	finished bool
}

func (s *memSink) WriteAt(b []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(b)) > int64(len(s.data)) {
		return 0, fmt.Errorf("write %d bytes at offset %d of %s: past the image's %d bytes", len(b), off, s.slot.name, len(s.data))
	}
	return copy(s.data[off:], b), nil
}

// Memory is durable as soon as it is written, but the readback may read
// only once the whole image is written and its hash checked (finish), as
// with a file, whose last region becomes durable only then: else a wrong
// image would end as readback_mismatch rather than hash_mismatch.
func (s *memSink) flusher(_ int64, publish func(int64)) flusher {
	return memFlusher{publish: publish, done: &s.finished}
}

func (s *memSink) reader(bool, []byte) (func(*readReq), bool, func() error, error) {
	read := func(r *readReq) {
		defer close(r.done)
		r.got = copy(r.buf[:r.n], s.data[r.off:])
	}
	return read, true, func() error { return nil }, nil
}

// close returns the image's memory; a write that got through its hash
// check leaves the image's digest (a readback failure after that is the
// caller's to act on, as with a file: the slot is marked bad either way).
func (s *memSink) close() error {
	s.release()
	s.data = nil
	m := s.slot
	m.mu.Lock()
	defer m.mu.Unlock()
	m.writing = false
	if s.finished {
		m.size, m.sha256 = s.size, s.sha256
	}
	return nil
}

type memFlusher struct {
	publish func(int64)
	done    *bool
}

func (f memFlusher) advance(int64) error { return nil }

func (f memFlusher) finish(size int64) error {
	f.publish(size)
	*f.done = true
	return nil
}
