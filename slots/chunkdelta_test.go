package slots

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otad/otad/internal/testkit/imagetest"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/payload"
)

// release is a content-defined chunked payload of a newer image, with the delta file
// of its chunks against an older image, served as otactl sign --chunked --delta-from
// writes them by default (a zstd-prefix store): at /rel.idx, /rel.store and
// /rel.delta.
type release struct {
	oldImg, img []byte
	idx, store  []byte
	delta       []byte // the delta file: its index, then the deltas
	want        payload.Expect
	x           *payload.Index
	entry       ota.Delta
	d           *payload.Delta
}

func makeRelease(t testing.TB, oldImg, img []byte, opts ...payload.DeltaOption) *release {
	t.Helper()
	var store bytes.Buffer
	res, err := payload.Build(t.Context(), bytes.NewReader(img), &store, payload.Options{Chunking: ota.ChunkingCDC, Level: 1,
		Compression: ota.CompressionZstdPrefix}) // otactl sign's default
	if err != nil {
		t.Fatal(err)
	}
	x, err := payload.ParseIndex(res.Index, res.Expect())
	if err != nil {
		t.Fatal(err)
	}
	var deltas bytes.Buffer
	dr, err := payload.BuildDelta(t.Context(), bytes.NewReader(oldImg), int64(len(oldImg)), bytes.NewReader(img), x, &deltas, opts...)
	if err != nil {
		t.Fatal(err)
	}
	r := &release{oldImg: oldImg, img: img, idx: res.Index, store: store.Bytes(), delta: append(bytes.Clone(dr.Index), deltas.Bytes()...),
		want: res.Expect(), x: x}
	if r.d, err = payload.ParseDelta(dr.Index, dr.Expect(), x, "delta"); err != nil {
		t.Fatal(err)
	}
	r.entry = dr.Entry("", x)
	return r
}

// fileServer serves files by path and counts the bytes it sends of each.
type fileServer struct {
	*httptest.Server
	mu    sync.Mutex
	files map[string][]byte
	sent  map[string]*atomic.Int64
	// fail, when set, answers a request itself when it returns true.
	fail func(w http.ResponseWriter, r *http.Request) bool
}

func newFileServer(t testing.TB, files map[string][]byte) *fileServer {
	s := &fileServer{files: files, sent: map[string]*atomic.Int64{}}
	for p := range files {
		s.sent[p] = new(atomic.Int64)
	}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		b, ok := s.files[r.URL.Path]
		fail := s.fail
		s.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		cw := &countingWriter{ResponseWriter: w, n: s.sent[r.URL.Path]}
		if fail != nil && fail(cw, r) {
			return
		}
		http.ServeContent(cw, r, "", time.Time{}, bytes.NewReader(b))
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *fileServer) total() int64 {
	var n int64
	for _, c := range s.sent {
		n += c.Load()
	}
	return n
}

// serve serves r, and returns the job that installs it on d, whose booted slot holds
// the image with sha256 booted (the journal's word).
func (r *release) serve(t testing.TB, d *chunkSlots, booted string) (*fileServer, ChunkedJob) {
	s := newFileServer(t, map[string][]byte{"/rel.idx": r.idx, "/rel.store": r.store, "/rel.delta": r.delta})
	e := r.entry
	e.URL = s.URL + "/rel.delta"
	chunks := &ota.Chunks{Deltas: &[]ota.Delta{e}}
	return s, ChunkedJob{
		Job: Job{Payload: ota.Payload{URL: s.URL + "/rel.store", Size: int64(len(r.img)), SHA256: sha(r.img), Chunks: chunks},
			Target: File(d.target), Booted: File(d.booted), Readback: true, Retry: fastRetry(&sleepRecorder{})},
		IndexURL: s.URL + "/rel.idx", Expect: r.want, Offer: "offer-" + sha(r.img)[:8], StateDir: d.state,
		BootedImage: booted,
	}
}

// update is an ext4 image and the same after an update (files changed, moved, one
// replaced, one added).
func update(t testing.TB) (oldImg, newImg []byte) {
	files := imagetest.Files(40, 8)
	oldImg = imagetest.Ext4(t, imagetest.Tree(t, files, nil), 48<<20)
	newImg = imagetest.Ext4(t, imagetest.Tree(t, imagetest.Updated(files, 2), []byte("a small new file\n")), 48<<20)
	return oldImg, newImg
}

func installDelta(t *testing.T, j ChunkedJob) ota.Transfer {
	t.Helper()
	var last ota.Progress
	j.Progress = func(p ota.Progress) { last = p }
	if err := WriteChunked(t.Context(), j); err != nil {
		t.Fatal(err)
	}
	return last.Transfer
}

// TestChunkedDeltaInstall: a device whose booted slot holds the older image fetches
// the index, the delta index and the deltas it needs, rebuilds those chunks from its
// booted slot, takes the rest from it, and reports the path and the bytes; the slot
// holds the image.
func TestChunkedDeltaInstall(t *testing.T) {
	oldImg, newImg := update(t)
	r := makeRelease(t, oldImg, newImg)
	d := newChunkSlots(t, len(newImg)+8192, oldImg)
	s, j := r.serve(t, d, sha(oldImg))
	p := installDelta(t, j)
	if got := readFile(t, d.target)[:len(newImg)]; !bytes.Equal(got, newImg) {
		t.Fatal("the slot does not hold the image")
	}
	full := int64(len(r.idx) + len(r.store))
	t.Logf("fetched %d bytes (served %d; the chunked payload is %d): %+v", p.BytesFetched, s.total(), full, p)
	if p.Path != ota.PathDelta || p.BytesDelta == 0 || p.BytesReused == 0 || p.BytesFetched != s.total() || p.BytesFetched > r.entry.Fetch+4096 {
		t.Fatalf("progress %+v, served %d, the manifest's fetch %d", p, s.total(), r.entry.Fetch)
	}
	if p.BytesFetched*10 > full {
		t.Errorf("fetched %d bytes of a %d-byte payload", p.BytesFetched, full)
	}
}

// TestChunkedDeltaAlteredBootedSlot: a delta whose older bytes in the booted slot
// were altered makes another chunk: refused by the chunk's hash before it is
// written, then fetched whole; the install succeeds.
func TestChunkedDeltaAlteredBootedSlot(t *testing.T) {
	oldImg, newImg := update(t)
	r := makeRelease(t, oldImg, newImg)
	if r.d.Count() == 0 {
		t.Fatal("no deltas")
	}
	dc := r.d.At(0)
	altered := bytes.Clone(oldImg)
	for _, rg := range dc.Ranges[:dc.N] {
		for o := rg.Off; o < rg.Off+rg.Len; o += 512 {
			altered[o] ^= 0x77
		}
	}
	var clean ota.Transfer
	var cleanStore int64
	for _, booted := range [][]byte{oldImg, altered} {
		d := newChunkSlots(t, len(newImg)+8192, booted)
		s, j := r.serve(t, d, sha(oldImg))
		p := installDelta(t, j)
		if got := readFile(t, d.target)[:len(newImg)]; !bytes.Equal(got, newImg) {
			t.Fatal("the slot does not hold the image")
		}
		if clean.Path == "" {
			clean, cleanStore = p, s.sent["/rel.store"].Load()
			continue
		}
		c := r.x.Chunk(dc.Chunk)
		if p.Path != ota.PathDelta || s.sent["/rel.store"].Load() < cleanStore+int64(c.StoreLength) || p.BytesDelta > clean.BytesDelta-int64(c.Length) {
			t.Fatalf("progress %+v (unaltered: %+v); the store sent %d bytes (unaltered: %d), chunk %d is %d stored",
				p, clean, s.sent["/rel.store"].Load(), cleanStore, dc.Chunk, c.StoreLength)
		}
	}
}

// TestChunkedDeltaIndexRefused: a delta file whose index cannot be fetched or is
// not the one the manifest names is not used: the install takes the chunks and
// succeeds, and the log says once which delta file failed and why (the same words
// as a delta file that fails later: docs/contract/chunked.md).
func TestChunkedDeltaIndexRefused(t *testing.T) {
	oldImg, newImg := update(t)
	for _, tc := range []struct {
		name  string
		alter func(r *release)
		gone  bool // the delta file answers 404
		why   string
	}{
		{"index altered", func(r *release) { r.delta[5] ^= 1 }, false, "index_sha256"},
		{"index that does not parse", func(r *release) {
			for i := range r.entry.IndexSize {
				r.delta[i] = byte(i)
			}
			r.entry.IndexSHA256 = sha(r.delta[:r.entry.IndexSize])
		}, false, "payload.chunks.deltas[0]"},
		{"404", func(*release) {}, true, "404"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := makeRelease(t, oldImg, newImg)
			r.delta = bytes.Clone(r.delta)
			tc.alter(r)
			d := newChunkSlots(t, len(newImg)+8192, oldImg)
			s, j := r.serve(t, d, sha(oldImg))
			if tc.gone {
				s.fail = func(w http.ResponseWriter, req *http.Request) bool {
					if req.URL.Path != "/rel.delta" {
						return false
					}
					http.NotFound(w, req)
					return true
				}
			}
			var logs syncBuffer
			j.Log = slog.New(slog.NewTextHandler(&logs, nil))
			p := installDelta(t, j)
			if !bytes.Equal(readFile(t, d.target)[:len(newImg)], newImg) {
				t.Fatal("the slot does not hold the image")
			}
			if n := s.sent["/rel.delta"].Load(); n > r.entry.IndexSize || p.Path != ota.PathChunked || p.BytesDelta != 0 {
				t.Fatalf("delta file sent %d bytes (index %d); progress %+v", n, r.entry.IndexSize, p)
			}
			log := logs.String()
			if strings.Count(log, "delta file failed") != 1 || !strings.Contains(log, "level=WARN") ||
				!strings.Contains(log, s.URL+"/rel.delta") || !strings.Contains(log, tc.why) {
				t.Fatalf("want one warning naming the delta file and %q; log:\n%s", tc.why, log)
			}
		})
	}
}
