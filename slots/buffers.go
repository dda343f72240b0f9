package slots

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// alignment of O_DIRECT offsets, lengths and buffers: the largest logical
// block size in use.
const alignment = 4096

// mapBuffers allocates n page-aligned buffers of size bytes outside the Go
// heap: O_DIRECT needs the alignment, and unmapping returns the memory to the
// system at once instead of leaving it to the garbage collector, which keeps
// the process's peak RSS at the pipeline's fixed budget.
func mapBuffers(n, size int) ([][]byte, func(), error) {
	mem, err := unix.Mmap(-1, 0, n*size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, nil, fmt.Errorf("allocate %d buffers of %d bytes: %w", n, size, err)
	}
	return split(mem, n, size), func() { unix.Munmap(mem) }, nil
}

// BufferLender is a Target that lends a write its pipeline's buffers
// instead of their being mapped for it (mapBuffers): a fleet of simulated
// devices in one process keeps them from one install to the next, where a
// fresh mapping's page faults and unmap cost more than the copy. Lend
// gives at least size bytes, page-aligned; giveBack is called once the
// write is done with them.
type BufferLender interface {
	LendBuffers(size int) (mem []byte, giveBack func(), err error)
}

// buffersFor is n buffers of size bytes, lent by t when it lends them,
// else mapped.
func buffersFor(t Target, n, size int) ([][]byte, func(), error) {
	l, ok := t.(BufferLender)
	if !ok {
		return mapBuffers(n, size)
	}
	mem, giveBack, err := l.LendBuffers(n * size)
	if err != nil {
		return nil, nil, fmt.Errorf("borrow %d buffers of %d bytes: %w", n, size, err)
	}
	return split(mem, n, size), giveBack, nil
}

func split(mem []byte, n, size int) [][]byte {
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = mem[i*size : (i+1)*size : (i+1)*size]
	}
	return bufs
}

func roundUp(n, a int64) int64 { return (n + a - 1) / a * a }
