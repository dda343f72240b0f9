package slots

import (
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/otad/otad/ota"
)

// TestDirectTargetWrites: the aligned part of each write goes through the
// O_DIRECT descriptor, an unaligned tail through the page cache, and the
// slot holds exactly the bytes written either way, nothing past them.
func TestDirectTargetWrites(t *testing.T) {
	const slotSize = 64 << 10
	tests := []struct {
		name       string
		buffered   bool
		writes     []int // lengths, written one after another from offset 0
		wantDirect bool
	}{
		{"o_direct, aligned", false, []int{8192, 4096}, true},
		{"o_direct, unaligned tail", false, []int{8192, 4096 + 777}, true},
		{"o_direct, shorter than a block", false, []int{100}, false},
		{"buffered", true, []int{8192, 4096 + 777}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := makeSlot(t, t.TempDir(), "slot", slotSize)
			tg, err := openTarget(path, "", filepath.Join(t.TempDir(), "none"))
			if err != nil {
				t.Fatal(err)
			}
			d := openDirect(tg, tt.buffered)
			if tt.buffered && d.direct != nil {
				t.Fatal("buffered target opened an O_DIRECT descriptor")
			}
			if !tt.buffered && d.direct == nil {
				t.Skip("the test directory's filesystem refuses O_DIRECT")
			}
			bufs, release, err := mapBuffers(1, 64<<10)
			if err != nil {
				t.Fatal(err)
			}
			defer release()
			var want []byte
			var off int64
			for i, n := range tt.writes {
				b := bufs[0][:n]
				copy(b, testImage(n, uint64(i+1)))
				if got, err := d.WriteAt(b, off); err != nil || got != n {
					t.Fatalf("WriteAt(%d bytes at %d) = %d, %v", n, off, got, err)
				}
				want = append(want, b...)
				off += int64(n)
			}
			if d.wrote != tt.wantDirect {
				t.Errorf("direct writes happened: %v, want %v", d.wrote, tt.wantDirect)
			}
			if err := d.close(); err != nil {
				t.Fatal(err)
			}
			checkSlot(t, path, want, slotSize)
		})
	}
}

// TestWriteDirectAndBuffered: a stream install gives the same slot and the
// same readback with O_DIRECT writes and through the page cache; with
// O_DIRECT the readback still trails the writer.
func TestWriteDirectAndBuffered(t *testing.T) {
	const imgSize = 2<<20 + 4321
	img := testImage(imgSize, 9)
	for _, buffered := range []bool{false, true} {
		for _, readback := range []bool{false, true} {
			t.Run(onOffName(buffered, readback), func(t *testing.T) {
				srv := serveBytes(t, compressed(t, img, ota.CompressionZstd))
				slot := makeSlot(t, t.TempDir(), "slot", imgSize+3*4096)
				tun := testTuning()
				tun.bufferedWrite = buffered
				var firstRead, written atomic.Int64
				firstRead.Store(-1)
				tun.beforeReadback = func(off, n int64, direct bool) {
					firstRead.CompareAndSwap(-1, written.Load())
				}
				job := Job{Payload: ota.Payload{URL: srv.URL, Compression: ota.CompressionZstd, Size: imgSize, SHA256: sha(img)}, Target: File(slot), Readback: readback,
					Progress: func(p ota.Progress) {
						if p.Phase == ota.Downloading {
							written.Store(p.BytesDone)
						}
					}}
				if err := write(t.Context(), job, tun); err != nil {
					t.Fatalf("Write() = %v", err)
				}
				checkSlot(t, slot, img, imgSize+3*4096)
				if first := firstRead.Load(); readback && (first < 0 || first >= imgSize) {
					t.Errorf("the readback started with %d of %d bytes written, want it to trail the writer", first, imgSize)
				}
			})
		}
	}
}

func onOffName(buffered, readback bool) string {
	name := "o_direct"
	if buffered {
		name = "buffered"
	}
	if readback {
		return name + ", readback"
	}
	return name
}
