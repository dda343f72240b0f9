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
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = mem[i*size : (i+1)*size : (i+1)*size]
	}
	return bufs, func() { unix.Munmap(mem) }, nil
}

func roundUp(n, a int64) int64 { return (n + a - 1) / a * a }
