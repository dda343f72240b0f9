package slots

import (
	"bytes"
	"errors"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/otad/otad/fetch"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/payload"
)

// chunkImage is n chunks and a bit of pseudo-random data with a run of zero
// chunks, so every kind of chunk and source occurs.
func chunkImage(n int, seed uint64) []byte {
	img := testImage(n*testChunk+1234, seed)
	clear(img[5*testChunk : 8*testChunk])
	return img
}

// rawChunkImage is chunkImage's shape of pseudo-random bytes without its
// zero runs inside chunks: stored raw, as every chunk of a squashfs or an
// encrypted image is.
func rawChunkImage(n int, seed uint64) []byte {
	img := make([]byte, n*testChunk+1234)
	rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), 2}).Read(img)
	clear(img[5*testChunk : 8*testChunk])
	return img
}

// imageKinds are the images the install tests that read chunks from the
// network run with: chunks stored compressed and stored raw.
func imageKinds() []imageKind {
	return []imageKind{{"zstd chunks", chunkImage}, {"raw chunks", rawChunkImage}}
}

type imageKind struct {
	name  string
	image func(n int, seed uint64) []byte
}

func TestWriteChunked(t *testing.T) {
	img := chunkImage(40, 3)
	for _, tc := range []struct {
		name     string
		readback bool
	}{{"readback off", false}, {"readback on", true}} {
		t.Run(tc.name, func(t *testing.T) {
			c := makeChunked(t, img)
			s := newStoreServer(t, c)
			d := newChunkSlots(t, len(img)+50000, testImage(len(img), 99))
			var last ota.Progress
			phases := map[ota.Phase]bool{}
			job := d.job(s, fastRetry(&sleepRecorder{}))
			job.Readback = tc.readback
			job.Progress = func(p ota.Progress) { last = p; phases[p.Phase] = true }
			if err := writeChunked(t.Context(), job, testTuning(), chunkTestTuning()); err != nil {
				t.Fatal(err)
			}
			checkSlot(t, d.target, img, d.slotSize)
			if want := int64(len(c.idx) + len(c.store)); last.BytesFetched != want || last.BytesReused != 0 || last.BytesDone != int64(len(img)) {
				t.Fatalf("last progress %+v, want %d bytes fetched, none reused, all done", last, want)
			}
			if s.served.Load() != int64(len(c.store)) {
				t.Fatalf("server sent %d store bytes, the store is %d", s.served.Load(), len(c.store))
			}
			if phases[ota.Verifying] != tc.readback {
				t.Fatalf("phases %v with readback %v", phases, tc.readback)
			}
			kept := readFile(t, filepath.Join(d.state, chunkDirName, sha(img)+indexSuffix))
			if !bytes.Equal(kept, c.idx) {
				t.Fatal("the index of the image written is not kept")
			}
			if _, err := os.Stat(filepath.Join(d.state, chunkDirName, checkpointName)); !os.IsNotExist(err) {
				t.Fatalf("checkpoint left after success: %v", err)
			}
		})
	}
}

// TestChunkedReuse: an update that changes 1% of the chunks, scattered,
// fetches little more than those chunks, whether the booted slot's chunks are
// known from the kept index or by hashing the slot (a factory image); a
// booted slot that no longer holds what its index says costs a fetch, never
// a wrong byte.
func TestChunkedReuse(t *testing.T) {
	v1 := chunkImage(400, 5)
	v2 := changed(v1, 3, 100) // chunks 3, 103, 203, 303: 1%
	for _, tc := range []struct {
		name     string
		kept     bool // the booted image's index is kept
		tamper   bool // the booted slot changed after it was written
		maxRatio float64
	}{
		{"kept index", true, false, 0.03},
		{"factory image", false, false, 0.03},
		{"booted slot changed", true, true, 0.04},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newChunkSlots(t, len(v1)+50000, v1)
			c1 := makeChunked(t, v1)
			bootedImage := ""
			if tc.kept {
				if err := os.MkdirAll(filepath.Join(d.state, chunkDirName), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(d.state, chunkDirName, sha(v1)+indexSuffix), c1.idx, 0o600); err != nil {
					t.Fatal(err)
				}
				bootedImage = sha(v1)
			}
			if tc.tamper {
				f, err := os.OpenFile(d.booted, os.O_WRONLY, 0)
				if err != nil {
					t.Fatal(err)
				}
				f.WriteAt([]byte("changed"), 50*testChunk+7)
				f.Close()
			}
			c2 := makeChunked(t, v2)
			s := newStoreServer(t, c2)
			job := d.job(s, fastRetry(&sleepRecorder{}))
			job.BootedImage, job.Readback = bootedImage, true
			var last ota.Progress
			job.Progress = func(p ota.Progress) { last = p }
			// No GC: a finalizer would close a file the install left open.
			defer debug.SetGCPercent(debug.SetGCPercent(-1))
			if err := writeChunked(t.Context(), job, testTuning(), chunkTestTuning()); err != nil {
				t.Fatal(err)
			}
			if n := openFiles(t, d.booted); n != 0 {
				t.Fatalf("the booted slot is still open %d times after the install", n)
			}
			checkSlot(t, d.target, v2, d.slotSize)
			served, limit := s.served.Load(), tc.maxRatio*float64(len(c2.store))
			t.Logf("served %d of %d store bytes (%.2f%%), fetched %d with the index, reused %d", served, len(c2.store), 100*float64(served)/float64(len(c2.store)), last.BytesFetched, last.BytesReused)
			if float64(served) > limit || last.BytesFetched != served+int64(len(c2.idx)) {
				t.Fatalf("served %d store bytes, want at most %.0f; reported %d fetched", served, limit, last.BytesFetched)
			}
			if last.BytesReused < int64(len(v2))*9/10 {
				t.Fatalf("reused %d bytes of %d", last.BytesReused, len(v2))
			}
			_, err := os.Stat(filepath.Join(d.state, chunkDirName, scanName))
			if scanned := err == nil; scanned == tc.kept {
				t.Fatalf("booted slot scanned: %v, with a kept index: %v", scanned, tc.kept)
			}
		})
	}
}

// openFiles counts this process's descriptors open on path.
func openFiles(t *testing.T, path string) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, fd := range fds {
		if p, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && p == path {
			n++
		}
	}
	return n
}

// TestChunkedAlteredChunk: a chunk altered in the store is fetched once
// more, then the install fails with chunk_mismatch, and the slot never held
// a byte of it.
func TestChunkedAlteredChunk(t *testing.T) {
	img := chunkImage(40, 7)
	c, s, d, job := rig(t, img)
	const bad = 21
	ch := c.x.Chunk(bad)
	c.store = bytes.Clone(c.store)
	c.store[ch.StoreOffset+int64(ch.StoreLength)/2] ^= 0x01
	err := writeChunked(t.Context(), job, testTuning(), chunkTestTuning())
	wantCode(t, err, ota.CodeChunkMismatch)
	var e *ota.Error
	if !errors.As(err, &e) || e.Field != "store.chunk[21]" {
		t.Fatalf("error %v names %q, want store.chunk[21]", err, e.Field)
	}
	if n := s.rangesCovering(bad); n != 2 {
		t.Fatalf("chunk %d fetched %d times, want 2 (once more after the mismatch)", bad, n)
	}
	slot := readFile(t, d.target)
	if !bytes.Equal(slot[ch.Offset:ch.Offset+int64(ch.Length)], bytes.Repeat([]byte{0xA5}, ch.Length)) {
		t.Fatal("the slot holds bytes of the altered chunk")
	}
	checkNotCorrupt(t, d, c)
}

// TestChunkedHostileIndex: an index that does not match the manifest, or a
// manifest whose values contradict themselves, is refused before the slot
// is even opened; a chunk that decodes to more than its size is refused
// before a byte is written.
func TestChunkedHostileIndex(t *testing.T) {
	img := chunkImage(12, 9)
	base := makeChunked(t, img)
	for _, tc := range []struct {
		name   string
		change func(c *chunked, j *ChunkedJob)
		code   ota.Code
	}{
		{"index sha256 differs", func(c *chunked, _ *ChunkedJob) { c.idx = bytes.Clone(c.idx); c.idx[40] ^= 1 }, ota.CodeIndexMismatch},
		{"index longer", func(c *chunked, _ *ChunkedJob) { c.idx = append(bytes.Clone(c.idx), 0) }, ota.CodeIndexMismatch},
		{"index shorter", func(c *chunked, _ *ChunkedJob) { c.idx = c.idx[:len(c.idx)-1] }, ota.CodeIndexMismatch},
		{"count overflows", func(_ *chunked, j *ChunkedJob) { j.Expect.ChunkCount = 1 << 62 }, ota.CodeIndexMismatch},
		{"index size overflows", func(_ *chunked, j *ChunkedJob) { j.Expect.IndexSize = -1 }, ota.CodeIndexMismatch},
		{"index larger than a device holds", func(_ *chunked, j *ChunkedJob) {
			j.Size = 4096 * 300000
			j.Expect = payload.Expect{ChunkSize: 4096, ChunkCount: 300000, ImageSize: j.Size, IndexSize: payload.IndexSize(300000),
				IndexSHA256: j.Expect.IndexSHA256, StoreSize: 1, Compression: ota.CompressionZstd}
		}, ota.CodeIndexMismatch},
		{"signed index with lengths past the store", func(c *chunked, j *ChunkedJob) {
			c.idx = bytes.Clone(c.idx)
			c.idx[payload.HeaderSize+2*payload.RecordSize+34] = 0x7f // chunk 2's length: 8 MiB more
			j.Expect = expectOf(c.idx, j.Expect)
		}, ota.CodeIndexMismatch},
		{"chunk decodes to more than its size", func(c *chunked, j *ChunkedJob) { oversizedFirstChunk(t, c, j) }, ota.CodeChunkMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := *base
			d := newChunkSlots(t, len(img)+50000, testImage(len(img), 99))
			s := newStoreServer(t, &c)
			job := d.job(s, fastRetry(&sleepRecorder{}))
			tc.change(&c, &job)
			if tc.code == ota.CodeIndexMismatch {
				// No slot at all: the index is refused before the slot is opened.
				job.Target = File(filepath.Join(d.dir, "missing.img"))
			}
			err := writeChunked(t.Context(), job, testTuning(), chunkTestTuning())
			wantCode(t, err, tc.code)
			checkSlot(t, d.target, nil, d.slotSize)
		})
	}
}

// TestChunkedAlteredChunkBootedSlotLacks: a chunk the booted slot should
// hold but does not (mounted writable) is fetched; when the store's copy is
// altered too, it is fetched once more before chunk_mismatch, as any other.
func TestChunkedAlteredChunkBootedSlotLacks(t *testing.T) {
	img := chunkImage(40, 29)
	const bad = 17
	d := newChunkSlots(t, len(img)+50000, img)
	c := makeChunked(t, img)
	if err := os.MkdirAll(filepath.Join(d.state, chunkDirName), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.state, chunkDirName, sha(img)+indexSuffix), c.idx, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(d.booted, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteAt([]byte("changed"), bad*testChunk+9)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	ch := c.x.Chunk(bad)
	c.store = bytes.Clone(c.store)
	c.store[ch.StoreOffset+int64(ch.StoreLength)/2] ^= 0x01
	s := newStoreServer(t, c)
	job := d.job(s, fastRetry(&sleepRecorder{}))
	job.BootedImage = sha(img)
	err = writeChunked(t.Context(), job, testTuning(), chunkTestTuning())
	wantCode(t, err, ota.CodeChunkMismatch)
	if n := s.rangesCovering(bad); n != 2 {
		t.Fatalf("chunk %d fetched %d times, want 2 (once more after the mismatch)", bad, n)
	}
	checkNotCorrupt(t, d, c)
}

// TestChunkedStagesIndex: a content-defined index (its records decompressed
// out of the file) is written to the state directory as the install starts
// and renamed into the kept index at its end, so the install does not hold
// the file in memory too (issue 30 item 4); a state directory that refuses
// the staged file costs nothing but the memory: the index is kept from its
// bytes. No staged file is left either way.
func TestChunkedStagesIndex(t *testing.T) {
	img := chunkImage(40, 7)
	var store bytes.Buffer
	res, err := payload.Build(t.Context(), bytes.NewReader(img), &store, payload.Options{Chunking: ota.ChunkingCDC, ChunkSize: testChunk, Level: 1})
	if err != nil {
		t.Fatal(err)
	}
	c := &chunked{img: img, idx: res.Index, store: store.Bytes(), want: res.Expect()}
	for _, tc := range []struct {
		name   string
		refuse bool
	}{{"staged", false}, {"staging refused", true}} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStoreServer(t, c)
			d := newChunkSlots(t, len(img)+50000, testImage(len(img), 98))
			job := d.job(s, fastRetry(&sleepRecorder{}))
			var logs syncBuffer
			job.Log = slog.New(slog.NewTextHandler(&logs, nil))
			job.StateFS = fullFS{full: func(p string) bool { return tc.refuse && strings.Contains(p, stagedIndex) }}
			if err := writeChunked(t.Context(), job, testTuning(), chunkTestTuning()); err != nil {
				t.Fatal(err)
			}
			checkSlot(t, d.target, img, d.slotSize)
			if kept := readFile(t, filepath.Join(d.state, chunkDirName, sha(img)+indexSuffix)); !bytes.Equal(kept, c.idx) {
				t.Fatal("the kept index is not the index fetched")
			}
			if _, err := os.Stat(filepath.Join(d.state, chunkDirName, stagedIndex)); !os.IsNotExist(err) {
				t.Fatalf("staged index left: %v", err)
			}
			if warned := strings.Contains(logs.String(), "staged index not written"); warned != tc.refuse {
				t.Fatalf("warned %v, want %v; log:\n%s", warned, tc.refuse, logs.String())
			}
		})
	}
}

// Each of a chunked install's range requests in flight has its own HTTP/1.1
// connection (fetch/client.go): the download client must keep as many open
// between ranges, or every range past them pays a TCP and TLS handshake.
func TestLanesFitTheConnectionsKept(t *testing.T) {
	if l := defaultChunkTuning().lanes; l > fetch.ConnsKeptPerHost {
		t.Errorf("%d lanes, but the download client keeps %d connections a host", l, fetch.ConnsKeptPerHost)
	}
}
