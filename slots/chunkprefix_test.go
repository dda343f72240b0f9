package slots

import (
	"bytes"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otad/otad/ota"
	"github.com/otad/otad/payload"
)

// prefixImage is n copies of 40 KiB of random bytes (and zeros), each with fresh
// random bytes in place of some, with 64 KiB of zeros after the first third: its
// chunks compress only against the bytes before them, so each zstd-prefix chunk
// decodes only with them.
func prefixImage(n, fresh int, seed uint64) []byte {
	block := testImage(40<<10, seed)
	noise := testImage(n*fresh+1, seed+1000)
	var img []byte
	for i := range n {
		block[(i*7919)%len(block)] ^= byte(i + 1)
		at := (i * 4099) % (len(block) - fresh)
		copy(block[at:at+fresh], noise[i*fresh:])
		img = append(img, block...)
		if i == n/3 {
			img = append(img, make([]byte, 64<<10)...)
		}
	}
	return img
}

// makePrefixChunked is makeChunked as otactl sign --chunked cuts by default: content-
// defined chunks, compression zstd-prefix, with a prefix_size in the header (256 KiB,
// 4 × the 2 × max_size of an older index: as long, against these chunks, as the
// default against 64 KiB chunks, and signed in seconds).
func makePrefixChunked(t testing.TB, img []byte) *chunked {
	t.Helper()
	var store bytes.Buffer
	res, err := payload.Build(t.Context(), bytes.NewReader(img), &store, payload.Options{ChunkSize: testChunk, Level: 1,
		Chunking: ota.ChunkingCDC, Compression: ota.CompressionZstdPrefix, PrefixSize: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	x, err := payload.ParseIndex(res.Index, res.Expect())
	if err != nil {
		t.Fatal(err)
	}
	if payload.PrefixSize(x) != 256<<10 {
		t.Fatalf("prefix size %d", payload.PrefixSize(x))
	}
	if res.Zstd < res.ChunkCount/2 || res.StoreSize > int64(len(img))/3 {
		t.Fatalf("test image: %d of %d chunks zstd, store %d of %d bytes: the prefixes are not used", res.Zstd, res.ChunkCount, res.StoreSize, len(img))
	}
	return &chunked{img: img, idx: res.Index, store: store.Bytes(), want: res.Expect(), x: x}
}

func prefixRig(t testing.TB, img []byte) (*chunked, *storeServer, *chunkSlots, ChunkedJob) {
	c := makePrefixChunked(t, img)
	s := newStoreServer(t, c)
	d := newChunkSlots(t, len(img)+50000, testImage(len(img), 99))
	return c, s, d, d.job(s, fastRetry(&sleepRecorder{}))
}

// TestPrefixInstall: a zstd-prefix payload installs, with the read-back and
// without, by ranges and from a server that serves none, fetching the index and
// the store once.
func TestPrefixInstall(t *testing.T) {
	img := prefixImage(30, 100, 5)
	for _, tc := range []struct {
		name             string
		readback, ranges bool
	}{{"readback off", false, true}, {"readback on", true, true}, {"no ranges", false, false}} {
		t.Run(tc.name, func(t *testing.T) {
			c, s, d, job := prefixRig(t, img)
			if !tc.ranges {
				s.setHandler(func(w http.ResponseWriter, r *http.Request, data []byte) { answer{start: -1}.write(w, r, data) })
			}
			var last ota.Progress
			job.Readback = tc.readback
			job.Progress = func(p ota.Progress) { last = p }
			if err := writeChunked(t.Context(), job, testTuning(), chunkTestTuning()); err != nil {
				t.Fatal(err)
			}
			checkSlot(t, d.target, img, d.slotSize)
			if want := int64(len(c.idx) + len(c.store)); last.BytesFetched != want || tc.ranges && s.served.Load() != int64(len(c.store)) {
				t.Fatalf("fetched %d bytes (store %d served), want %d", last.BytesFetched, s.served.Load(), want)
			}
		})
	}
}

// TestPrefixReuse: an update changing a few chunks of a factory image fetches those
// chunks, each alone: the bytes before a fetched chunk come from the booted slot
// and are its dictionary.
func TestPrefixReuse(t *testing.T) {
	old := prefixImage(60, 100, 8)
	img := changed(old, 3, 25)
	c := makePrefixChunked(t, img)
	s := newStoreServer(t, c)
	d := newChunkSlots(t, len(img)+50000, old)
	var last ota.Progress
	job := d.job(s, fastRetry(&sleepRecorder{}))
	job.Progress = func(p ota.Progress) { last = p }
	if err := writeChunked(t.Context(), job, testTuning(), chunkTestTuning()); err != nil {
		t.Fatal(err)
	}
	checkSlot(t, d.target, img, d.slotSize)
	t.Logf("store %d bytes, fetched %d, reused %d of %d image bytes", len(c.store), s.served.Load(), last.BytesReused, len(img))
	if s.served.Load() > int64(len(c.store))/4 || last.BytesReused < int64(len(img))*3/4 {
		t.Fatalf("served %d of %d store bytes, reused %d of %d image bytes", s.served.Load(), len(c.store), last.BytesReused, len(img))
	}
}

// TestPrefixRawRuns: runs of raw chunks longer than the prefix (a compressed
// file system's data) between compressible ones, which the install does not keep
// as a dictionary: every zstd chunk after one still decodes, also where the
// booted slot was to give it and does not hold it (its kept index says it does),
// so it is fetched from the store and decoded with the bytes before it.
func TestPrefixRawRuns(t *testing.T) {
	var img []byte
	for i, raw := range []int{0, 600 << 10, 400 << 10} {
		img = append(img, testImage(raw, uint64(30+i))...)
		img = append(img, prefixImage(30, 100, uint64(40+i))...)
	}
	for _, booted := range []string{"nothing", "the image, altered after its raw runs"} {
		t.Run(booted, func(t *testing.T) {
			c, s, d, job := prefixRig(t, img)
			var altered []int
			if booted != "nothing" {
				old := bytes.Clone(img)
				last := payload.KindZero // of the chunks before, zero runs aside
				for i := range c.x.Count() {
					ch := c.x.Chunk(i)
					if ch.Kind == payload.KindZstd && last == payload.KindRaw {
						old[ch.Offset+int64(ch.Length)/2] ^= 0x10
						altered = append(altered, i)
					}
					if ch.Kind != payload.KindZero {
						last = ch.Kind
					}
				}
				d = newChunkSlots(t, len(img)+50000, old)
				if err := os.MkdirAll(filepath.Join(d.state, chunkDirName), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(d.state, chunkDirName, sha(img)+indexSuffix), c.idx, 0o600); err != nil {
					t.Fatal(err)
				}
				job = d.job(s, fastRetry(&sleepRecorder{}))
				job.BootedImage = sha(img)
			}
			if err := writeChunked(t.Context(), job, testTuning(), chunkTestTuning()); err != nil {
				t.Fatal(err)
			}
			checkSlot(t, d.target, img, d.slotSize)
			if len(altered) < 2 && booted != "nothing" {
				t.Fatalf("altered %v: the test image has no zstd chunk after a raw run", altered)
			}
			for _, i := range altered {
				if s.rangesCovering(i) == 0 {
					t.Fatalf("chunk %d, altered in the booted slot, was not fetched", i)
				}
			}
		})
	}
}

// TestPrefixCorruptFrame: a frame that arrives corrupt is caught before the write
// and fetched once more; one corrupt again fails the install with chunk_mismatch
// naming the chunk, and the slot never holds its bytes.
func TestPrefixCorruptFrame(t *testing.T) {
	img := prefixImage(30, 100, 7)
	for _, tc := range []struct {
		name   string
		always bool
	}{{"corrupt once", false}, {"corrupt always", true}} {
		t.Run(tc.name, func(t *testing.T) {
			c, s, d, job := prefixRig(t, img)
			ch := firstOfKind(t, c.x, 10, payload.KindZstd)
			bad := ch.Num
			var served atomic.Int64
			s.setHandler(func(w http.ResponseWriter, r *http.Request, data []byte) {
				start, end, ok := asked(r)
				if ok && start <= ch.StoreOffset && ch.StoreOffset < end && (tc.always || served.Add(1) == 1) {
					data = bytes.Clone(data)
					data[ch.StoreOffset+int64(ch.StoreLength)/2] ^= 0x40
				}
				http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(data))
			})
			err := writeChunked(t.Context(), job, testTuning(), chunkTestTuning())
			if n := s.rangesCovering(bad); n != 2 {
				t.Fatalf("chunk %d fetched %d times, want 2 (once more after the mismatch)", bad, n)
			}
			if !tc.always {
				if err != nil {
					t.Fatal(err)
				}
				checkSlot(t, d.target, img, d.slotSize)
				return
			}
			var e *ota.Error
			if !errors.As(err, &e) || e.Code != ota.CodeChunkMismatch || e.Field != "store.chunk["+strconv.Itoa(bad)+"]" {
				t.Fatalf("err %v, want chunk_mismatch naming store.chunk[%d]", err, bad)
			}
			slot := readFile(t, d.target)
			if !bytes.Equal(slot[ch.Offset:ch.Offset+int64(ch.Length)], bytes.Repeat([]byte{0xA5}, ch.Length)) {
				t.Fatal("the slot holds bytes of the corrupt chunk")
			}
			checkNotCorrupt2(t, d, c)
		})
	}
}

// TestPrefixResumes: an install stopped at 10, 50 and 90% of the store resumes each
// time from its checkpoint, the bytes before it read back from the target; one whose
// target no longer holds them starts over.
func TestPrefixResumes(t *testing.T) {
	img := prefixImage(300, 8<<10, 17)
	for _, readback := range []bool{false, true} {
		c, s, d, job := prefixRig(t, img)
		job.Readback = readback
		ct := resumeTuning()
		ct.checkpointBytes = 256 << 10
		for _, pct := range []int64{10, 50, 90} {
			stopAt(t, c, s, job, ct, pct)
		}
		cp := readCheckpoint(t, d)
		if cp.Next == 0 {
			t.Fatal("no checkpoint past chunk 0")
		}
		if readback {
			// The chunk before the checkpoint changed on the target: with the
			// read-back nothing checked it, the prefix does.
			prev := c.x.Chunk(cp.Next - 1)
			for prev.Kind == payload.KindZero {
				prev = c.x.Chunk(prev.Num - 1)
			}
			alterFile(t, d.target, prev.Offset+int64(prev.Length)/2)
		}
		s.setHandler(nil)
		served := s.served.Load()
		if err := writeChunked(t.Context(), job, testTuning(), ct); err != nil {
			t.Fatal(err)
		}
		checkSlot(t, d.target, img, d.slotSize)
		last := s.served.Load() - served
		t.Logf("readback %v: checkpoint at chunk %d of %d; the last run fetched %d of %d store bytes", readback, cp.Next, c.x.Count(), last, len(c.store))
		if readback && last < int64(len(c.store))*9/10 {
			t.Fatalf("started over after a changed target: fetched only %d of %d", last, len(c.store))
		}
		if left := int64(len(c.store)) - c.x.Chunk(cp.Next).StoreOffset; !readback && last > left {
			t.Fatalf("resumed at chunk %d: fetched %d store bytes, more than the %d from there", cp.Next, last, left)
		}
	}
}

// alterFile flips a byte of the file at path.
func alterFile(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [1]byte
	if _, err := f.ReadAt(b[:], off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b[:], off); err != nil {
		t.Fatal(err)
	}
}

// checkNotCorrupt2 is checkNotCorrupt for content-defined chunks: each chunk or
// zero run of the slot holds the image's bytes or the filler it started with.
func checkNotCorrupt2(t testing.TB, d *chunkSlots, c *chunked) {
	t.Helper()
	got := readFile(t, d.target)
	for i := range c.x.Count() {
		ch := c.x.Chunk(i)
		b := got[ch.Offset : ch.Offset+int64(ch.Length)]
		if !bytes.Equal(b, c.img[ch.Offset:ch.Offset+int64(ch.Length)]) && !bytes.Equal(b, bytes.Repeat([]byte{0xA5}, len(b))) {
			t.Fatalf("slot chunk %d holds neither the image's bytes nor the filler", i)
		}
	}
}
