package slots

import (
	"context"
	"fmt"
)

// ring is a lane's buffer space: each chunk the lane fetches takes only the
// room it needs, right after the one before (wrapping at the end), instead
// of a buffer sized for the largest chunk. Content-defined chunks average
// under half their largest size, so the same memory holds two to three
// times the chunks, and the lanes whose fetches come later work that much
// further ahead while the assembler takes the earliest one's (docs/design.md,
// "Writing a slot").
//
// Chunks come back through free (a piece's pool, as any buffer does) in any
// order; their room is taken again once every chunk taken before them is
// back, which in a lane's order of delivery is how the assembler takes
// them.
type ring struct {
	mem   []byte
	free  chan []byte // given back: a taken slice, or a part starting where it starts
	spans []ringSpan  // taken and not yet reused, oldest first
}

// ringSpan is a taken part of a ring, mem[start:end].
type ringSpan struct {
	start, end int
	back       bool
}

// ringUnit is what a ring's takes are rounded up to: a page, so that a ring
// of n bytes never has more than n/ringUnit chunks out (the capacity of the
// lane's channels).
const ringUnit = 4096

func newRing(mem []byte) *ring {
	return &ring{mem: mem, free: make(chan []byte, len(mem)/ringUnit)}
}

// slots is how many chunks can be out of r at once.
func (r *ring) slots() int { return cap(r.free) }

// take returns n bytes of r (with as much capacity, never more), waiting
// for chunks to come back when it has no room.
func (r *ring) take(ctx context.Context, n int) ([]byte, error) {
	size := int(roundUp(int64(n), ringUnit))
	if size > len(r.mem) {
		return nil, fmt.Errorf("a lane buffer of %d bytes cannot hold %d", len(r.mem), n)
	}
	for {
		r.reclaim()
		if at, ok := r.room(size); ok {
			r.spans = append(r.spans, ringSpan{start: at, end: at + size})
			return r.mem[at : at+n : at+size], nil
		}
		select {
		case b := <-r.free:
			r.back(b)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// reclaim takes in what came back without waiting, and reuses the room of
// the oldest chunks that are back.
func (r *ring) reclaim() {
	for len(r.free) > 0 {
		r.back(<-r.free)
	}
	k := 0
	for k < len(r.spans) && r.spans[k].back {
		k++
	}
	r.spans = append(r.spans[:0], r.spans[k:]...)
}

// back marks the chunk b starts as back.
func (r *ring) back(b []byte) {
	for i := range r.spans {
		s := &r.spans[i]
		if !s.back && &r.mem[s.start] == &b[:1][0] {
			s.back = true
			return
		}
	}
	// Not one of the ring's: a bug, and handing it out again would corrupt a chunk.
	panic("slots: a buffer given back to a lane's ring it did not come from")
}

// room is where size bytes fit after the newest chunk taken, or from the
// start of the ring when they do not fit before its end.
func (r *ring) room(size int) (int, bool) {
	if len(r.spans) == 0 {
		return 0, true
	}
	first, last := r.spans[0].start, r.spans[len(r.spans)-1].end
	if last > first {
		// Taken: [first, last).
		if len(r.mem)-last >= size {
			return last, true
		}
		return 0, first >= size
	}
	// Wrapped: taken [first, end) and [0, last).
	return last, first-last >= size
}
