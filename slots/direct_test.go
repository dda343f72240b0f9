package slots

import (
	"bytes"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

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

// TestDirectTargetWritev: a vectored write goes to O_DIRECT when every
// buffer but the last is whole blocks and the offset is aligned, the last
// buffer's partial block through the page cache; otherwise the whole write
// is buffered. The slot holds exactly the bytes either way.
func TestDirectTargetWritev(t *testing.T) {
	const slotSize = 64 << 10
	tests := []struct {
		name       string
		off        int64
		iov        []int // lengths of the buffers of one write
		wantDirect bool
	}{
		{"aligned buffers", 0, []int{8192, 4096, 4096}, true},
		{"aligned, partial last block", 4096, []int{8192, 4096 + 777}, true},
		{"aligned, last buffer under a block", 0, []int{8192, 100}, true},
		{"unaligned middle buffer", 0, []int{4096, 100, 4096}, false},
		{"unaligned offset", 512, []int{4096, 4096}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := makeSlot(t, t.TempDir(), "slot", slotSize)
			tg, err := openTarget(path, "", filepath.Join(t.TempDir(), "none"))
			if err != nil {
				t.Fatal(err)
			}
			d := openDirect(tg, false)
			if d.direct == nil {
				t.Skip("the test directory's filesystem refuses O_DIRECT")
			}
			bufs, release, err := mapBuffers(len(tt.iov), 16<<10)
			if err != nil {
				t.Fatal(err)
			}
			defer release()
			want := bytes.Repeat([]byte{0xA5}, int(tt.off)) // makeSlot's fill
			var iov [][]byte
			for i, n := range tt.iov {
				b := bufs[i][:n]
				copy(b, testImage(n, uint64(i+1)))
				iov = append(iov, b)
				want = append(want, b...)
			}
			if err := d.writev(iov, tt.off); err != nil {
				t.Fatalf("writev(%v at %d) = %v", tt.iov, tt.off, err)
			}
			if d.wrote != tt.wantDirect {
				t.Errorf("direct write happened: %v, want %v", d.wrote, tt.wantDirect)
			}
			if err := d.close(); err != nil {
				t.Fatal(err)
			}
			checkSlot(t, path, want, slotSize)
		})
	}
}

// TestWriteGathersWaitingChunks: while a write is under way the producer
// fills the other buffers, and the next write takes every chunk waiting in
// one vectored write, not one chunk a write; the slot and the read-back
// are right.
func TestWriteGathersWaitingChunks(t *testing.T) {
	tun := testTuning()
	const chunks = 7
	imgSize := chunks*tun.chunk - 1234 // the last chunk ends in a partial block
	img := testImage(imgSize, 5)
	for _, readback := range []bool{false, true} {
		t.Run(onOffName(false, readback), func(t *testing.T) {
			srv := serveBytes(t, img)
			slot := makeSlot(t, t.TempDir(), "slot", imgSize+4096)
			tun := testTuning()
			tun.rbBuffers = 0
			var batches []int
			tun.beforeWrite = func(p *pipeline, batch []chunk) {
				batches = append(batches, len(batch))
				if len(batches) > 1 {
					return
				}
				// Hold the first write until the producer has filled every
				// other buffer (or the image is all read).
				deadline := time.Now().Add(30 * time.Second)
				for len(p.full)+len(batch) < min(tun.buffers, chunks) && time.Now().Before(deadline) {
					time.Sleep(time.Millisecond)
				}
			}
			job := Job{Payload: ota.Payload{URL: srv.URL, Compression: ota.CompressionNone, Size: int64(imgSize), SHA256: sha(img)}, Target: File(slot), Readback: readback}
			if err := write(t.Context(), job, tun); err != nil {
				t.Fatalf("Write() = %v", err)
			}
			checkSlot(t, slot, img, imgSize+4096)
			total, most := 0, 0
			for _, n := range batches {
				total += n
				most = max(most, n)
			}
			if total != chunks || most < 2 || len(batches) >= chunks {
				t.Errorf("writes of %v chunks: want all %d chunks written, some writes of more than one", batches, chunks)
			}
		})
	}
}
