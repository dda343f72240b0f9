package slots

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestStagerWrites: pieces at any offset, written through the staging
// buffers, leave the slot holding exactly them, with the chunks the target
// already holds (not written) and the bytes around the image untouched; and
// each piece is accounted for, in order, only once the slot holds its
// bytes, the premise of every checkpoint (docs/contract/chunked.md).
func TestStagerWrites(t *testing.T) {
	const slotSize = 96 << 10
	type span struct {
		n     int
		write bool // false: the target holds it (its bytes are 0xA5)
	}
	tests := []struct {
		name     string
		start    int // image offset of the first piece
		spans    []span
		stage    int // staging buffer bytes
		buffered bool
		direct   bool // some bytes go with O_DIRECT
	}{
		{"aligned, one buffer", 0, []span{{4096, true}, {8192, true}}, 16384, false, true},
		{"unaligned chunks cross buffers", 0, []span{{5000, true}, {7777, true}, {12345, true}, {3001, true}, {9000, true}}, 8192, false, true},
		{"unaligned start and end", 1234, []span{{6000, true}, {20000, true}, {111, true}}, 8192, false, true},
		{"held chunks between runs", 0, []span{{5000, true}, {6000, false}, {7000, true}, {4096, false}, {10000, true}, {3, true}}, 8192, false, true},
		{"a run inside one block", 100, []span{{200, true}, {5000, false}, {300, true}}, 8192, false, false},
		{"buffered slot", 333, []span{{5000, true}, {6000, false}, {17000, true}}, 8192, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := makeSlot(t, t.TempDir(), "slot", slotSize)
			tg, err := openTarget(path, "", filepath.Join(t.TempDir(), "none"))
			if err != nil {
				t.Fatal(err)
			}
			d := openDirect(tg, tt.buffered)
			defer d.close()
			if !tt.buffered && d.direct == nil {
				t.Skip("the test directory's filesystem refuses O_DIRECT")
			}
			bufs, release, err := mapBuffers(2, tt.stage)
			if err != nil {
				t.Fatal(err)
			}
			defer release()
			want := bytes.Repeat([]byte{0xA5}, slotSize)
			var pieces []piece
			off := tt.start
			for i, s := range tt.spans {
				p := piece{chunk: i, off: int64(off), write: s.write}
				if s.write {
					p.buf = testImage(s.n, uint64(i+7))
					copy(want[off:], p.buf)
				} else {
					p.buf = want[off : off+s.n]
				}
				pieces = append(pieces, p)
				off += s.n
			}
			check, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer check.Close()
			var accounted []int
			done := func(p piece) error {
				got := make([]byte, len(p.buf))
				if _, err := check.ReadAt(got, p.off); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want[p.off:p.off+int64(len(p.buf))]) {
					t.Errorf("piece %d accounted for before the slot holds it", p.chunk)
				}
				accounted = append(accounted, p.chunk)
				return nil
			}
			runStager(t, d, bufs, pieces, done)
			for i := range pieces {
				if i >= len(accounted) || accounted[i] != i {
					t.Fatalf("pieces accounted for: %v, want each in order", accounted)
				}
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Error("the slot does not hold the pieces written, and only them")
			}
			if d.wrote != tt.direct {
				t.Errorf("direct writes happened: %v, want %v", d.wrote, tt.direct)
			}
		})
	}
}

// runStager writes pieces as chunkWriter.staged does.
func runStager(t *testing.T, d *directTarget, bufs [][]byte, pieces []piece, done func(piece) error) {
	t.Helper()
	ctx := context.Background()
	st := newStager(d, d.flusher(1<<20, func(int64) {}), bufs, nil)
	go st.run()
	defer st.close()
	for _, p := range pieces {
		var err error
		if p.write {
			err = st.add(ctx, p, done)
		} else if err = st.drain(ctx, done); err == nil {
			err = done(p)
		}
		if err == nil {
			err = st.poll(ctx, done)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := st.drain(ctx, done); err != nil {
		t.Fatal(err)
	}
}
