package slots

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/otad/otad/payload"
)

// ringOffset is where b starts in r.
func ringOffset(r *ring, b []byte) int {
	for i := range r.mem {
		if &r.mem[i] == &b[:1][0] {
			return i
		}
	}
	return -1
}

func TestRingTakes(t *testing.T) {
	const unit = ringUnit
	type step struct {
		take int // bytes to take; 0: give back the oldest chunk still out
		at   int // where the take must start, in units; -1: it must wait
	}
	for _, tc := range []struct {
		name  string
		size  int // in units
		steps []step
	}{
		{"back to back, rounded up to a unit", 8, []step{{100, 0}, {unit, 1}, {unit + 1, 2}, {3 * unit, 4}}},
		{"full until the oldest is back", 4, []step{{2 * unit, 0}, {2 * unit, 2}, {unit, -1}, {0, 0}, {unit, 0}, {unit, 1}, {unit, -1}}},
		{"wraps when the end has no room", 6, []step{{2 * unit, 0}, {2 * unit, 2}, {unit, 4}, {0, 0}, {2 * unit, 0}, {unit, -1}, {0, 0}, {2 * unit, 2}}},
		{"waits when the start has too little room", 5, []step{{2 * unit, 0}, {2 * unit, 2}, {0, 0}, {2 * unit, 0}, {unit, -1}, {0, 0}, {unit, 2}, {3 * unit, -1}}},
		{"empty starts again at 0", 4, []step{{3 * unit, 0}, {0, 0}, {2 * unit, 0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRing(make([]byte, tc.size*unit))
			var out [][]byte
			for i, s := range tc.steps {
				if s.take == 0 {
					r.free <- out[0]
					out = out[1:]
					continue
				}
				ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
				b, err := r.take(ctx, s.take)
				cancel()
				if s.at < 0 {
					if !errors.Is(err, context.DeadlineExceeded) {
						t.Fatalf("step %d: take %d: got room at %d (%v), want a wait", i, s.take, ringOffset(r, b), err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("step %d: take %d: %v", i, s.take, err)
				}
				if got := ringOffset(r, b); got != s.at*unit {
					t.Fatalf("step %d: take %d at %d, want %d", i, s.take, got, s.at*unit)
				}
				if len(b) != s.take || cap(b)%unit != 0 || cap(b) < s.take || cap(b) >= s.take+unit {
					t.Fatalf("step %d: take %d: len %d cap %d", i, s.take, len(b), cap(b))
				}
				out = append(out, b)
			}
		})
	}
}

// Chunks given back out of order are reused only once every chunk taken
// before them is back, and no chunk taken shares a byte with one still out.
func TestRingOutOfOrder(t *testing.T) {
	r := newRing(make([]byte, 16*ringUnit))
	sizes := []int{3, 1, 5, 2, 4, 1, 3, 2, 6, 1, 2, 5, 3, 1, 4, 2}
	var out [][]byte
	owner := make([]int, len(r.mem)) // chunk number + 1 holding each byte
	for i := range 300 {
		n := sizes[i%len(sizes)]*ringUnit - i%7
		var b []byte
		for {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Millisecond)
			var err error
			b, err = r.take(ctx, n)
			cancel()
			if err == nil {
				break
			}
			if len(out) == 0 {
				t.Fatalf("take %d: %v with every chunk back", n, err)
			}
			// No room: give one back, the newest every other time (which
			// frees nothing until those before it are back).
			j := 0
			if (i+len(out))%2 == 0 {
				j = len(out) - 1
			}
			giveBack(r, owner, out[j])
			out = append(out[:j], out[j+1:]...)
		}
		at := ringOffset(r, b)
		for k := at; k < at+cap(b); k++ {
			if owner[k] != 0 {
				t.Fatalf("chunk %d at %d overlaps chunk %d, still out", i, at, owner[k]-1)
			}
			owner[k] = i + 1
		}
		out = append(out, b)
	}
	for _, b := range out {
		giveBack(r, owner, b)
	}
	if !drained(r) {
		t.Fatalf("chunks out after all came back: %v", r.spans)
	}
}

// drained reports whether every chunk taken from r is back.
func drained(r *ring) bool {
	r.reclaim()
	return len(r.spans) == 0
}

func giveBack(r *ring, owner []int, b []byte) {
	at := ringOffset(r, b)
	for k := at; k < at+cap(b); k++ {
		owner[k] = 0
	}
	r.free <- b[:0]
}

func TestRingWaitsForTheOldest(t *testing.T) {
	r := newRing(make([]byte, 4*ringUnit))
	a, _ := r.take(t.Context(), 2*ringUnit)
	b, _ := r.take(t.Context(), 2*ringUnit)
	got := make(chan int, 1)
	go func() {
		c, err := r.take(t.Context(), ringUnit)
		if err != nil {
			got <- -1
			return
		}
		got <- ringOffset(r, c)
	}()
	r.free <- b // the newest: its room follows a chunk still out
	select {
	case at := <-got:
		t.Fatalf("took room at %d while the oldest chunk was out", at)
	case <-time.After(50 * time.Millisecond):
	}
	r.free <- a
	select {
	case at := <-got:
		if at != 0 {
			t.Fatalf("took room at %d, want 0", at)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no room after every chunk came back")
	}
}

func TestRingRefuses(t *testing.T) {
	r := newRing(make([]byte, 4*ringUnit))
	if _, err := r.take(t.Context(), 4*ringUnit+1); err == nil {
		t.Fatal("took more than the ring holds")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a buffer from elsewhere was taken back")
		}
	}()
	if _, err := r.take(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	r.free <- make([]byte, 1)
	r.reclaim()
}

// A lane's ring is deep when the network brings most of the image whole on
// two CPUs, and shallow when deltas or the booted slot do, or on one CPU;
// never under two of the largest chunks.
func TestRingFor(t *testing.T) {
	ct := defaultChunkTuning()
	ct.cpus = 2
	one := ct
	one.cpus = 1
	const cs = 136 << 10
	if got := one.ringFor(&payload.Plan{NetworkBytes: 1 << 30}, cs); got != ct.laneBytesAided {
		t.Fatalf("ring of %d bytes on one CPU, want %d", got, ct.laneBytesAided)
	}
	for _, tc := range []struct {
		name string
		plan payload.Plan
		want int
	}{
		{"nothing to reuse", payload.Plan{NetworkBytes: 1 << 30}, ct.laneBytes},
		{"half from the network", payload.Plan{NetworkBytes: 1 << 29, BootedBytes: 1 << 29}, ct.laneBytes},
		{"mostly the booted slot", payload.Plan{NetworkBytes: 1 << 20, BootedBytes: 1 << 30}, ct.laneBytesAided},
		{"mostly deltas", payload.Plan{NetworkBytes: 1 << 20, DeltaBytes: 1 << 24, BootedBytes: 1 << 28}, ct.laneBytesAided},
		{"resumed, the rest from the network", payload.Plan{TargetBytes: 1 << 30, ZeroBytes: 1 << 30, NetworkBytes: 1 << 20}, ct.laneBytes},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ct.ringFor(&tc.plan, cs); got != tc.want {
				t.Fatalf("ring of %d bytes, want %d", got, tc.want)
			}
		})
	}
	if got := ct.ringFor(&payload.Plan{}, 4<<20); got != 8<<20 {
		t.Fatalf("ring of %d bytes for 4 MiB chunks, want two of them", got)
	}
}
