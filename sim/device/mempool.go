package device

import (
	"sync"

	"golang.org/x/sys/unix"
)

// MemPool keeps the memory of slot writes that ended for the next write to
// take, outside the Go heap: a fleet runs a bounded number of installs at
// once, and a fresh mapping's first touch (the kernel zeroing every page,
// then unmapping it) cost a simulated install more than the copy itself —
// a third of otasim fleet's CPU at 10,000 devices (make bench-fleet).
// A reused mapping holds the last image's bytes until they are written
// over, as a flash slot does; the readback reads only what was written.
type MemPool struct {
	keep int

	mu   sync.Mutex
	free [][]byte
}

// NewMemPool keeps up to keep mappings (two per install at once: the
// image, and the pipeline's buffers the slots lend it); more are returned
// to the system.
func NewMemPool(keep int) *MemPool { return &MemPool{keep: keep} }

// get is a mapping of at least size bytes: a kept one, else a new one.
func (p *MemPool) get(size int) ([]byte, error) {
	if p != nil {
		// The smallest that fits: images and pipeline buffers differ in size.
		p.mu.Lock()
		best := -1
		for i, m := range p.free {
			if len(m) >= size && (best < 0 || len(m) < len(p.free[best])) {
				best = i
			}
		}
		if best >= 0 {
			m, last := p.free[best], len(p.free)-1
			p.free[best], p.free[last] = p.free[last], nil
			p.free = p.free[:last]
			p.mu.Unlock()
			return m, nil
		}
		p.mu.Unlock()
	}
	return unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
}

// put keeps mem for the next write, or returns it to the system once keep
// mappings are kept.
func (p *MemPool) put(mem []byte) error {
	if p != nil {
		p.mu.Lock()
		if len(p.free) < p.keep {
			p.free = append(p.free, mem)
			p.mu.Unlock()
			return nil
		}
		p.mu.Unlock()
	}
	return unix.Munmap(mem)
}
