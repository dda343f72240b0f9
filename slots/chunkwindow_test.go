package slots

import (
	"bytes"
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otad/otad/payload"
)

// TestWindowPlace: a lane gets the room of image bytes at their place in
// the window at once when everything more than a window before their end
// is written, waits for the writer to move past it otherwise, and is
// refused bytes the writer has passed.
func TestWindowPlace(t *testing.T) {
	const size = 8 << 10
	tests := []struct {
		name    string
		low     int64
		off     int64
		n       int
		advance int64 // the writer moves to here while the lane waits; 0: never
		wantAt  int   // where in mem the room starts
		wantErr bool
	}{
		{"inside the window", 0, 4096, 1000, 0, 4096, false},
		{"up to the window's end", 4096, 10000, 2288, 0, 10000 - size, false},
		{"waits for the writer", 0, 9000, 3000, 4000, 9000 - size, false},
		{"the writer never moves", 0, 9000, 3000, 0, 0, true},
		{"across the window's end", 0, 6000, 3000, 0, 0, true},
		{"behind the writer", 5000, 4000, 100, 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mem := make([]byte, size)
			w := newWindow(mem, tt.low)
			ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
			defer cancel()
			var moved atomic.Bool
			if tt.advance > 0 {
				go func() {
					time.Sleep(20 * time.Millisecond)
					moved.Store(true)
					w.advance(tt.advance)
				}()
			}
			got, err := w.place(ctx, tt.off, tt.n)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("place(%d, %d) = room, want an error", tt.off, tt.n)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.advance > 0 && !moved.Load() {
				t.Fatal("the lane got its room before the writer moved")
			}
			if len(got) != tt.n || cap(got) != tt.n || &got[0] != &mem[tt.wantAt] {
				t.Fatalf("room of %d bytes (cap %d) at %p, want %d at mem[%d]", len(got), cap(got), &got[0], tt.n, tt.wantAt)
			}
		})
	}
}

func TestWindowWraps(t *testing.T) {
	w := newWindow(make([]byte, 8192), 0)
	for _, tt := range []struct {
		off  int64
		n    int
		want bool
	}{
		{0, 8192, false}, {8000, 192, false}, {8000, 193, true}, {8192 * 5, 100, false}, {8192*5 - 1, 2, true},
	} {
		if got := w.wraps(tt.off, tt.n); got != tt.want {
			t.Errorf("wraps(%d, %d) = %v, want %v", tt.off, tt.n, got, tt.want)
		}
	}
}

// TestWindowFor: the lanes read into the window only where nearly all the
// network brings is raw chunks, and then it has room for what their rings
// would have held, less on one CPU.
func TestWindowFor(t *testing.T) {
	random := makeChunked(t, rawChunkImage(64, 5))
	text := makeChunked(t, bytes.Repeat([]byte("a compressible line of a root file system\n"), 64*testChunk/40))
	ct := defaultChunkTuning()
	cs := bufSize(random.x)
	mem := make([]byte, ct.windowBytes(ringSize(ct.laneBytes, cs), cs))
	stage := ct.stageBufs * ct.stageBytes
	tests := []struct {
		name      string
		c         *chunked
		cpus      int
		wantPlace bool
		wantSize  int
	}{
		{"raw chunks", random, 2, true, stage + ct.lanes*ringSize(ct.laneBytes, cs)},
		{"raw chunks, one CPU", random, 1, true, stage + ct.lanes*ringSize(ct.laneBytesAided, cs)},
		{"zstd chunks", text, 2, false, stage},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := payload.MakePlan(tt.c.x, payload.PlanInput{MaxSpan: ct.maxSpan})
			if err != nil {
				t.Fatal(err)
			}
			ct := ct
			ct.cpus = tt.cpus
			win, place := ct.windowFor(p, tt.c.x, mem)
			if place != tt.wantPlace || len(win) != tt.wantSize {
				t.Fatalf("window of %d bytes, lanes place: %v; want %d, %v", len(win), place, tt.wantSize, tt.wantPlace)
			}
		})
	}
}

// TestChunkedSmallWindow: raw chunks read by the lanes straight into a
// window that wraps many times over the image, one of them altered on its
// first arrival (fetched once more into its place), leave the slot holding
// the image, with the writer hashing it as written.
func TestChunkedSmallWindow(t *testing.T) {
	img := rawChunkImage(96, 11)
	c, s, d, job := rig(t, img)
	const bad = 40
	ch := c.x.Chunk(bad)
	var altered atomic.Bool
	s.setHandler(func(w http.ResponseWriter, r *http.Request, store []byte) {
		if start, end, ok := asked(r); ok && start <= ch.StoreOffset && ch.StoreOffset < end && altered.CompareAndSwap(false, true) {
			store = bytes.Clone(store)
			store[ch.StoreOffset+10] ^= 0xFF
		}
		http.ServeContent(w, r, "img.store", time.Time{}, bytes.NewReader(store))
	})
	ct := chunkTestTuning()
	ct.stageBytes, ct.stageBufs = 8<<10, 3
	ct.laneBytes, ct.laneBytesAided = 2*testChunk, 2*testChunk
	cs := bufSize(c.x)
	if n := ct.windowBytes(ringSize(ct.laneBytes, cs), cs); int64(len(img))/int64(n) < 10 {
		t.Fatalf("a window of %d bytes wraps fewer than 10 times over %d", n, len(img))
	}
	if err := writeChunked(t.Context(), job, testTuning(), ct); err != nil {
		t.Fatal(err)
	}
	if !altered.Load() {
		t.Fatal("the altered chunk was never served")
	}
	if n := s.rangesCovering(bad); n != 2 {
		t.Fatalf("chunk %d fetched %d times, want 2 (once more after the mismatch)", bad, n)
	}
	checkSlot(t, d.target, img, d.slotSize)
}
