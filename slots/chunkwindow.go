package slots

import (
	"context"
	"fmt"
	"sync"

	"github.com/otad/otad/payload"
)

// window is the staging memory of an install written through the stager
// (chunkstage.go), indexed by the image: image byte o lives at
// mem[o mod len(mem)]. The stager copies the pieces into it at their place
// and writes it out in order; with raw chunks from the network, the lanes
// read each one straight into its place instead (place), so that its bytes
// are copied once, by the socket read, not a second time into a staging
// buffer: on a 2-core machine that copy was a tenth of a chunked install's
// CPU, and the staging buffers' and the lanes' memory are then one
// (docs/design.md, "Writing a slot").
//
// Everything before low is written (or held by the target) and needs no
// room: the image's bytes from low to low+len(mem) each have a place of
// their own, so a lane may fill any of them while the stager writes others.
type window struct {
	mem   []byte
	mu    sync.Mutex
	low   int64
	moved chan struct{} // closed when low moves
}

func newWindow(mem []byte, low int64) *window {
	return &window{mem: mem, low: low, moved: make(chan struct{})}
}

// size is the window's length in image bytes.
func (w *window) size() int64 { return int64(len(w.mem)) }

// at is image bytes [off, off+n) in the window, which must not cross its
// end (wraps).
func (w *window) at(off int64, n int) []byte {
	p := int(off % w.size())
	return w.mem[p : p+n : p+n]
}

// wraps reports whether image bytes [off, off+n) cross the window's end,
// and so have no one slice of it.
func (w *window) wraps(off int64, n int) bool {
	return off%w.size()+int64(n) > w.size()
}

// advance says the image before to needs no room any more.
func (w *window) advance(to int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if to > w.low {
		w.low = to
		close(w.moved)
		w.moved = make(chan struct{})
	}
}

// place is the room for image bytes [off, off+n), waiting until everything
// more than a window before their end is written. The bytes must not wrap.
func (w *window) place(ctx context.Context, off int64, n int) ([]byte, error) {
	for {
		w.mu.Lock()
		low, moved := w.low, w.moved
		w.mu.Unlock()
		if w.wraps(off, n) {
			return nil, fmt.Errorf("image bytes [%d, %d) cross the staging window's end", off, off+int64(n))
		}
		if off < low {
			// Written already, or its room another's: never, as the lanes
			// fetch what the writer has yet to write.
			return nil, fmt.Errorf("image bytes at %d are behind the staging window (at %d)", off, low)
		}
		if off+int64(n) <= low+w.size() {
			return w.at(off, n), nil
		}
		select {
		case <-moved:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// windowFor is the part of mem (the window mapped at its largest,
// chunkBufs) an install of plan p uses: the staging buffers alone, or,
// when nearly all the network brings is raw chunks, which the lanes read
// into it, room for as much as their rings would have held (ringFor: less
// on one CPU), rings they then leave untouched.
func (ct chunkTuning) windowFor(p *payload.Plan, x *payload.Index, mem []byte) (win []byte, lanesPlace bool) {
	stage := ct.stageBufs * ct.stageBytes
	if p.NetworkBytes == 0 || rawNetworkBytes(p, x)*10 < p.NetworkBytes*9 {
		return mem[:stage], false
	}
	cs := bufSize(x)
	n := min(len(mem), ct.windowBytes(ct.ringFor(p, cs), cs))
	return mem[:n], true
}

// rawNetworkBytes is how much of what the network brings for plan p is raw
// chunks of the store.
func rawNetworkBytes(p *payload.Plan, x *payload.Index) int64 {
	var n int64
	for _, st := range p.Steps {
		if st.Source != payload.FromNetwork {
			continue
		}
		if c := x.Chunk(st.Chunk); c.Kind == payload.KindRaw {
			n += int64(c.StoreLength)
		}
	}
	return n
}

// windowBytes is a window with room for the staging buffers and the lanes'
// rings of ring bytes each, and at least two staging buffers and a chunk
// buffer of cs bytes, so that a lane can always place the chunk the writer
// waits for (its end is at most a staging buffer and a chunk past what is
// written).
func (ct chunkTuning) windowBytes(ring, cs int) int {
	n := ct.stageBufs*ct.stageBytes + ct.lanes*ring
	return int(roundUp(int64(max(n, 2*ct.stageBytes+cs)), alignment))
}
