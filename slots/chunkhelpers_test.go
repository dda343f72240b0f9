package slots

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/otad/otad/backoff"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/payload"
)

// chunked is a chunked payload of an image, as otactl sign --chunked makes it.
type chunked struct {
	img   []byte
	idx   []byte
	store []byte
	want  payload.Expect
	x     *payload.Index
}

const testChunk = 16 << 10

func makeChunked(t testing.TB, img []byte) *chunked {
	t.Helper()
	var store bytes.Buffer
	res, err := payload.Build(t.Context(), bytes.NewReader(img), &store, payload.Options{ChunkSize: testChunk, Level: 1})
	if err != nil {
		t.Fatal(err)
	}
	x, err := payload.ParseIndex(res.Index, res.Expect())
	if err != nil {
		t.Fatal(err)
	}
	return &chunked{img: img, idx: res.Index, store: store.Bytes(), want: res.Expect(), x: x}
}

// changed returns a copy of img with every step-th chunk, from the first,
// given other bytes.
func changed(img []byte, first, step int) []byte {
	out := bytes.Clone(img)
	for off := first * testChunk; off < len(out); off += step * testChunk {
		out[off+100] ^= 0xFF
		out[min(off+testChunk, len(out))-1] ^= 0x5A
	}
	return out
}

// storeServer serves an index and a store. The store goes through handle,
// which by default is http.ServeContent (ranges as a static server does).
type storeServer struct {
	*httptest.Server
	c      *chunked
	served atomic.Int64 // store bytes written to clients
	asked  atomic.Int64 // store requests
	mu     sync.Mutex
	ranges []string // the Range header of each store request
	handle func(w http.ResponseWriter, r *http.Request, store []byte)
}

func newStoreServer(t testing.TB, c *chunked) *storeServer {
	s := &storeServer{c: c}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/img.idx":
			http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(s.c.idx))
		case "/img.store":
			s.asked.Add(1)
			s.mu.Lock()
			s.ranges = append(s.ranges, r.Header.Get("Range"))
			h := s.handle
			s.mu.Unlock()
			cw := &countingWriter{ResponseWriter: w, n: &s.served}
			if h != nil {
				h(cw, r, s.c.store)
				return
			}
			http.ServeContent(cw, r, "", time.Time{}, bytes.NewReader(s.c.store))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *storeServer) setHandler(h func(w http.ResponseWriter, r *http.Request, store []byte)) {
	s.mu.Lock()
	s.handle = h
	s.mu.Unlock()
}

// rangesCovering counts the store requests whose range covers chunk i.
func (s *storeServer) rangesCovering(i int) int {
	c := s.c.x.Chunk(i)
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.ranges {
		var a, b int64
		if _, err := fmt.Sscanf(r, "bytes=%d-%d", &a, &b); err == nil && a <= c.StoreOffset && c.StoreOffset+int64(c.StoreLength)-1 <= b {
			n++
		}
	}
	return n
}

type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (w *countingWriter) Write(b []byte) (int, error) {
	n, err := w.ResponseWriter.Write(b)
	w.n.Add(int64(n))
	return n, err
}

func (w *countingWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// chunkSlots is a target slot, a booted slot and a state directory.
type chunkSlots struct {
	dir, target, booted, state string
	slotSize                   int
}

func newChunkSlots(t testing.TB, slotSize int, booted []byte) *chunkSlots {
	dir := t.TempDir()
	d := &chunkSlots{dir: dir, target: makeSlot(t, dir, "b.img", slotSize), booted: filepath.Join(dir, "a.img"),
		state: filepath.Join(dir, "state"), slotSize: slotSize}
	if err := os.WriteFile(d.booted, append(bytes.Clone(booted), make([]byte, slotSize-len(booted))...), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(d.state, 0o700); err != nil {
		t.Fatal(err)
	}
	return d
}

// rig is the usual setup: a chunked payload of img served, a device whose
// booted slot holds something else, and the job that installs it.
func rig(t testing.TB, img []byte) (*chunked, *storeServer, *chunkSlots, ChunkedJob) {
	c := makeChunked(t, img)
	s := newStoreServer(t, c)
	d := newChunkSlots(t, len(img)+50000, testImage(len(img), 99))
	return c, s, d, d.job(s, fastRetry(&sleepRecorder{}))
}

func (d *chunkSlots) job(s *storeServer, retry backoff.Policy) ChunkedJob {
	c := s.c
	return ChunkedJob{
		Job: Job{Payload: ota.Payload{URL: s.URL + "/img.store", Size: int64(len(c.img)), SHA256: sha(c.img)}, Target: File(d.target), Booted: File(d.booted),
			Retry: retry},
		IndexURL: s.URL + "/img.idx", Expect: c.want, Offer: "offer-" + sha(c.img)[:8], StateDir: d.state,
	}
}

// chunkTestTuning checkpoints often so that small images cross many
// checkpoints, and keeps requests small so that there are many.
func chunkTestTuning() chunkTuning {
	ct := defaultChunkTuning()
	ct.laneBytes, ct.laneBytesAided = 4*testChunk, 4*testChunk
	ct.localBytes = 4 * testChunk
	ct.batchBytes = 8 * testChunk
	ct.maxSpan = 8 * testChunk
	ct.checkpointBytes = 256 << 10
	ct.checkpointGap = 0
	ct.checkpointEvery = time.Hour
	return ct
}

// checkNotCorrupt asserts that each chunk of the slot holds either the
// image's bytes or the filler it started with: never anything else.
func checkNotCorrupt(t testing.TB, d *chunkSlots, c *chunked) {
	t.Helper()
	got := readFile(t, d.target)
	for i := range c.x.Count() {
		ch := c.x.Chunk(i)
		b := got[ch.Offset : ch.Offset+int64(ch.Length)]
		if sha256.Sum256(b) != ch.SHA256 && !bytes.Equal(b, bytes.Repeat([]byte{0xA5}, len(b))) {
			t.Fatalf("slot chunk %d holds neither the image's bytes nor the filler", i)
		}
	}
	if !bytes.Equal(got[len(c.img):], bytes.Repeat([]byte{0xA5}, len(got)-len(c.img))) {
		t.Fatal("slot written past the image end")
	}
}

func wantCode(t testing.TB, err error, code ota.Code) {
	t.Helper()
	if ota.CodeOf(err) != code {
		t.Fatalf("err = %v, want code %s", err, code)
	}
}

// expectOf is e for another index file: its size and sha256.
func expectOf(idx []byte, e payload.Expect) payload.Expect {
	e.IndexSize, e.IndexSHA256 = int64(len(idx)), sha(idx)
	return e
}

// oversizedFirstChunk replaces chunk 0 by a zstd frame of its bytes and
// more: a signed index whose first chunk decodes past its size.
func oversizedFirstChunk(t testing.TB, c *chunked, j *ChunkedJob) {
	t.Helper()
	first := c.x.Chunk(0)
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		t.Fatal(err)
	}
	frame := enc.EncodeAll(append(bytes.Clone(c.img[:first.Length]), make([]byte, 1000)...), nil)
	if len(frame) >= first.Length {
		t.Fatalf("test image chunk 0 does not compress (%d bytes)", len(frame))
	}
	idx := bytes.Clone(c.idx)
	rec := idx[payload.HeaderSize:]
	rec[32], rec[33], rec[34], rec[35] = byte(len(frame)), byte(len(frame)>>8), byte(len(frame)>>16), byte(payload.KindZstd)
	c.idx, c.store = idx, append(frame, c.store[first.StoreLength:]...)
	j.Expect.StoreSize = int64(len(c.store))
	j.Expect = expectOf(idx, j.Expect)
}

// firstOfKind is the first chunk of x from chunk from on stored as kind.
func firstOfKind(t testing.TB, x *payload.Index, from int, kind payload.Kind) payload.Chunk {
	t.Helper()
	for i := from; i < x.Count(); i++ {
		if c := x.Chunk(i); c.Kind == kind {
			return c
		}
	}
	t.Fatalf("no chunk of kind %v from chunk %d on", kind, from)
	return payload.Chunk{}
}
