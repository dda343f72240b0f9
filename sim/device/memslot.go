package device

import (
	"fmt"
	"io"
	"sync"

	"github.com/otad/otad/ota"
	"github.com/otad/otad/slots"
)

// MemSlot is a slot that lives in memory, for simulated devices: a fleet of
// thousands in one process keeps no file per slot. At rest it holds only
// what was written last (size and sha256); the image's bytes take memory
// only while a write has the slot open, for the readback to read, and are
// returned to the system when it ends (or kept for the next write, by the
// fleet's MemPool). It is the slot writer's Target.
type MemSlot struct {
	name     string
	capacity int64
	pool     *MemPool // nil: each write maps its own memory

	mu      sync.Mutex
	writing bool
	size    int64  // the image held, when complete
	sha256  string // its digest; "" after a write that did not complete
}

var (
	_ slots.Target       = (*MemSlot)(nil)
	_ slots.BufferLender = (*MemSlot)(nil)
)

// NewMemSlot is an empty slot of capacity bytes; name is how messages call it.
func NewMemSlot(name string, capacity int64) *MemSlot {
	return &MemSlot{name: name, capacity: capacity}
}

// pooled is the slot writing into pool's memory.
func (m *MemSlot) pooled(pool *MemPool) *MemSlot {
	m.pool = pool
	return m
}

// LendBuffers lends a write into the slot its pipeline's buffers from the
// pool (slots.BufferLender); without a pool they are mapped for the write.
func (m *MemSlot) LendBuffers(size int) ([]byte, func(), error) {
	mem, err := m.pool.get(size)
	if err != nil {
		return nil, nil, err
	}
	return mem, func() { _ = m.pool.put(mem) }, nil
}

// Name is how messages call the slot.
func (m *MemSlot) Name() string { return m.name }

// Capacity is how many bytes the slot holds.
func (m *MemSlot) Capacity() (int64, error) { return m.capacity, nil }

// Image is the image the last complete write left in the slot; ok is false
// when none did (never written, or the last write did not complete).
func (m *MemSlot) Image() (size int64, sha256 string, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.size, m.sha256, m.sha256 != ""
}

// Open claims the slot for one write; what it held is gone from then on.
func (m *MemSlot) Open(size int64) (slots.Writer, error) {
	if size > m.capacity {
		return nil, ota.Wrap(ota.CodeSizeMismatch, fmt.Errorf("slot %s holds %d bytes, the image is %d bytes", m.name, m.capacity, size))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.writing {
		return nil, ota.Wrap(ota.CodeWriteFailed, fmt.Errorf("slot %s is being written already", m.name))
	}
	// Outside the Go heap, so that the memory is the system's again the
	// moment the install ends (as the writer's buffers are), or the pool's.
	data, err := m.pool.get(int(max(size, 1)))
	if err != nil {
		return nil, ota.Wrap(ota.CodeWriteFailed, fmt.Errorf("slot %s: allocate %d bytes: %w", m.name, size, err))
	}
	m.writing, m.size, m.sha256 = true, 0, ""
	return &memWriter{slot: m, mem: data, data: data[:size], size: size}, nil
}

// memWriter is a MemSlot open for one write.
type memWriter struct {
	slot      *MemSlot
	mem, data []byte
	size      int64
	sha256    string // set by Commit
}

func (w *memWriter) WriteAt(b []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(b)) > int64(len(w.data)) {
		return 0, fmt.Errorf("write %d bytes at offset %d of %s: past the image's %d bytes", len(b), off, w.slot.name, len(w.data))
	}
	return copy(w.data[off:], b), nil
}

func (w *memWriter) ReadAt(b []byte, off int64) (int, error) {
	if off < 0 || off > int64(len(w.data)) {
		return 0, fmt.Errorf("read at offset %d of %s: past the image's %d bytes", off, w.slot.name, len(w.data))
	}
	n := copy(b, w.data[off:])
	if n < len(b) {
		return n, io.EOF
	}
	return n, nil
}

// Commit: memory is durable as soon as it is written; the digest is what
// the slot holds once the write closes.
func (w *memWriter) Commit(sha256 string) error {
	w.sha256 = sha256
	return nil
}

// Close returns the image's memory; a write that got through its hash
// check leaves the image's digest (a readback failure after that is the
// caller's to act on, as with a file: the slot is marked bad either way).
func (w *memWriter) Close() error {
	err := w.slot.pool.put(w.mem)
	w.mem, w.data = nil, nil
	m := w.slot
	m.mu.Lock()
	defer m.mu.Unlock()
	m.writing = false
	if w.sha256 != "" {
		m.size, m.sha256 = w.size, w.sha256
	}
	return err
}
