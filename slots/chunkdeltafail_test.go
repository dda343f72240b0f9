package slots

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otad/otad/ota"
)

// cutWriter lets left bytes of a body through, then fails: the server cuts the
// connection short of the Content-Length it sent.
type cutWriter struct {
	http.ResponseWriter
	left int
}

func (w *cutWriter) Write(b []byte) (int, error) {
	if len(b) > w.left {
		n, _ := w.ResponseWriter.Write(b[:w.left])
		w.left = 0
		return n, errors.New("cut")
	}
	w.left -= len(b)
	return w.ResponseWriter.Write(b)
}

// syncBuffer is a log's buffer, written from the install's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestChunkedDeltaFileFails: a delta file whose ranges fail once its index was fetched
// (gone: 404; a server error that lasts: 503, retried and given up; bodies cut short
// halfway, retried from the first delta not yet received until no progress is made),
// from the first range or after one answered, leaves the chunks it was to bring to the
// store: fetched whole, with a warning. The install succeeds, and reports the path
// and the bytes as they were: delta only when chunks were rebuilt from deltas.
func TestChunkedDeltaFileFails(t *testing.T) {
	oldImg, newImg := update(t)
	r := makeRelease(t, oldImg, newImg)
	// No bodies: the bytes served are the bytes a device counts as fetched.
	notFound := func(w http.ResponseWriter, _ *http.Request, _ []byte) { w.WriteHeader(http.StatusNotFound) }
	unavailable := func(w http.ResponseWriter, _ *http.Request, _ []byte) { w.WriteHeader(http.StatusServiceUnavailable) }
	cut := func(w http.ResponseWriter, req *http.Request, b []byte) {
		var a, z int
		fmt.Sscanf(req.Header.Get("Range"), "bytes=%d-%d", &a, &z)
		http.ServeContent(&cutWriter{ResponseWriter: w, left: (z - a + 1) / 2}, req, "", time.Time{}, bytes.NewReader(b))
	}
	for _, tc := range []struct {
		name   string
		after  int64 // delta ranges answered before the failures start
		answer func(w http.ResponseWriter, r *http.Request, b []byte)
	}{
		{"404", 0, notFound},
		{"503 that lasts", 0, unavailable},
		{"cut short", 0, cut},
		{"404 after one range", 1, notFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newChunkSlots(t, len(newImg)+8192, oldImg)
			s, j := r.serve(t, d, sha(oldImg))
			var ranges, failed atomic.Int64
			s.mu.Lock()
			s.fail = func(w http.ResponseWriter, req *http.Request) bool {
				var a int64
				if req.URL.Path != "/rel.delta" || func() bool { _, err := fmt.Sscanf(req.Header.Get("Range"), "bytes=%d-", &a); return err != nil }() || a < r.entry.IndexSize {
					return false
				}
				if ranges.Add(1) <= tc.after {
					return false
				}
				failed.Add(1)
				tc.answer(w, req, r.delta)
				return true
			}
			s.mu.Unlock()
			var logs syncBuffer
			j.Log = slog.New(slog.NewTextHandler(&logs, nil))
			p := installDelta(t, j)
			if got := readFile(t, d.target)[:len(newImg)]; !bytes.Equal(got, newImg) {
				t.Fatal("the slot does not hold the image")
			}
			t.Logf("%d delta ranges asked, %d failed; %+v", ranges.Load(), failed.Load(), p)
			if failed.Load() == 0 || !strings.Contains(logs.String(), "delta file failed") || p.BytesFetched != s.total() || p.BytesReused == 0 {
				t.Fatalf("%d failed; progress %+v, served %d; log:\n%s", failed.Load(), p, s.total(), logs.String())
			}
			switch rebuilt := p.BytesDelta > 0; {
			case tc.after == 0 && tc.name != "cut short" && (rebuilt || p.Path != ota.PathChunked):
				t.Fatalf("no delta arrived, yet progress %+v", p)
			case tc.after > 0 && (!rebuilt || p.Path != ota.PathDelta):
				t.Fatalf("a delta range arrived, yet progress %+v", p)
			case (p.Path == ota.PathDelta) != rebuilt:
				t.Fatalf("path %s with %d bytes rebuilt", p.Path, p.BytesDelta)
			}
		})
	}
}
