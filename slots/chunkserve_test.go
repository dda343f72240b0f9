package slots

import (
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otad/otad/ota"
)

// answer writes a 206 for [start, end] of data with the given Content-Range,
// or the whole of data with 200 when start < 0; cut > 0 stops after that many
// bytes (the connection is dropped), stall > 0 then waits that long first.
type answer struct {
	start, end   int64
	contentRange string
	cut          int
	stall        time.Duration
	contentType  string
}

func (a answer) write(w http.ResponseWriter, r *http.Request, data []byte) {
	body := data
	if a.start >= 0 {
		body = data[a.start : a.end+1]
		w.Header().Set("Content-Range", a.contentRange)
	}
	if a.contentType != "" {
		w.Header().Set("Content-Type", a.contentType)
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	if a.start >= 0 {
		w.WriteHeader(http.StatusPartialContent)
	}
	if a.cut <= 0 || a.cut >= len(body) {
		w.Write(body)
		return
	}
	w.Write(body[:a.cut])
	w.(http.Flusher).Flush()
	if a.stall > 0 {
		select {
		case <-time.After(a.stall):
		case <-r.Context().Done():
		}
	}
	panic(http.ErrAbortHandler)
}

// asked is the single range of a request, or ok false.
func asked(r *http.Request) (start, end int64, ok bool) {
	_, err := fmt.Sscanf(r.Header.Get("Range"), "bytes=%d-%d", &start, &end)
	return start, end, err == nil
}

func exact(start, end, total int64) answer {
	return answer{start: start, end: end, contentRange: fmt.Sprintf("bytes %d-%d/%d", start, end, total)}
}

// TestChunkedServers: how the install meets servers that do not answer as
// asked. Ranges ignored or botched fall back to reading the store from its
// start; a store of another size is size_mismatch; cuts and stalls are
// the network's: waited out, and when they go on past the offer's expiry,
// download_failed; a 404 ends it at once. The slot never holds a
// byte that is not the image's.
func TestChunkedServers(t *testing.T) {
	for _, kind := range imageKinds() {
		t.Run(kind.name, func(t *testing.T) {
			img := kind.image(60, 11)
			c := makeChunked(t, img)
			total := int64(len(c.store))
			for _, tc := range []struct {
				name   string
				handle func(n int64, w http.ResponseWriter, r *http.Request, data []byte) // n counts requests from 1
				code   ota.Code
				whole  bool // the store is read from its start: said once in the log
			}{
				{"200 to a range request: read from the start", func(_ int64, w http.ResponseWriter, r *http.Request, d []byte) {
					answer{start: -1}.write(w, r, d)
				}, "", true},
				{"multipart answer", func(_ int64, w http.ResponseWriter, r *http.Request, d []byte) {
					if s, e, ok := asked(r); ok {
						body := fmt.Sprintf("--B\r\nContent-Range: bytes %d-%d/%d\r\n\r\n%s\r\n--B--\r\n", s, e, total, d[s:e+1])
						w.Header().Set("Content-Type", "multipart/byteranges; boundary=B")
						w.WriteHeader(http.StatusPartialContent)
						w.Write([]byte(body))
						return
					}
					answer{start: -1}.write(w, r, d)
				}, "", true},
				{"wrong Content-Range", func(_ int64, w http.ResponseWriter, r *http.Request, d []byte) {
					if s, e, ok := asked(r); ok && e+1 < total {
						exact(s+1, e+1, total).write(w, r, d)
						return
					}
					answer{start: -1}.write(w, r, d)
				}, "", true},
				{"Content-Range naming the asked range but other bytes count", func(_ int64, w http.ResponseWriter, r *http.Request, d []byte) {
					if s, e, ok := asked(r); ok {
						a := exact(s, e, total)
						a.end = max(s, e-1) // one byte short of what it claims
						a.write(w, r, d)
						return
					}
					answer{start: -1}.write(w, r, d)
				}, "", true},
				{"416", func(_ int64, w http.ResponseWriter, r *http.Request, d []byte) {
					w.Header().Set("Content-Range", fmt.Sprintf("bytes */%d", total-100))
					w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
				}, ota.CodeSizeMismatch, false},
				{"store changes size mid-install", func(n int64, w http.ResponseWriter, r *http.Request, d []byte) {
					s, e, _ := asked(r)
					if n > 3 {
						exact(s, e, total+4096).write(w, r, d)
						return
					}
					exact(s, e, total).write(w, r, d)
				}, ota.CodeSizeMismatch, false},
				{"store changes size, server ignores ranges", func(n int64, w http.ResponseWriter, r *http.Request, d []byte) {
					if n > 1 {
						d = d[:len(d)-5000]
					}
					answer{start: -1}.write(w, r, d)
				}, ota.CodeSizeMismatch, false},
				{"truncated once", func(n int64, w http.ResponseWriter, r *http.Request, d []byte) {
					s, e, _ := asked(r)
					a := exact(s, e, total)
					if n == 2 {
						a.cut = int(e-s) / 2
					}
					a.write(w, r, d)
				}, "", false},
				{"always truncated", func(_ int64, w http.ResponseWriter, r *http.Request, d []byte) {
					s, e, _ := asked(r)
					a := exact(s, e, total)
					a.cut = 10
					a.write(w, r, d)
				}, ota.CodeDownloadFailed, false},
				{"stalled once", func(n int64, w http.ResponseWriter, r *http.Request, d []byte) {
					s, e, _ := asked(r)
					a := exact(s, e, total)
					if n == 2 {
						a.cut, a.stall = int(e-s)/2, 5*time.Second
					}
					a.write(w, r, d)
				}, "", false},
				{"always stalled", func(_ int64, w http.ResponseWriter, r *http.Request, d []byte) {
					s, e, _ := asked(r)
					a := exact(s, e, total)
					a.cut, a.stall = 1, 5*time.Second
					a.write(w, r, d)
				}, ota.CodeDownloadFailed, false},
				{"503 once", func(n int64, w http.ResponseWriter, r *http.Request, d []byte) {
					if n == 1 {
						w.WriteHeader(http.StatusServiceUnavailable)
						return
					}
					s, e, _ := asked(r)
					exact(s, e, total).write(w, r, d)
				}, "", false},
				{"404", func(_ int64, w http.ResponseWriter, r *http.Request, _ []byte) {
					http.NotFound(w, r)
				}, ota.CodeDownloadFailed, false},
			} {
				t.Run(tc.name, func(t *testing.T) {
					s := newStoreServer(t, c)
					var n atomic.Int64
					s.setHandler(func(w http.ResponseWriter, r *http.Request, d []byte) { tc.handle(n.Add(1), w, r, d) })
					d := newChunkSlots(t, len(img)+50000, testImage(len(img), 99))
					tun := testTuning()
					tun.stall = 200 * time.Millisecond
					job := d.job(s, fastRetry(&sleepRecorder{}))
					job.Readback = true
					job.Until = time.Now().Add(time.Second)
					var logs syncBuffer
					job.Log = slog.New(slog.NewTextHandler(&logs, nil))
					err := writeChunked(t.Context(), job, tun, chunkTestTuning())
					if tc.code == "" {
						if err != nil {
							t.Fatal(err)
						}
						checkSlot(t, d.target, img, d.slotSize)
						// Reading the store whole costs up to all of it: the log says why, once.
						said := strings.Count(logs.String(), "answered without Range")
						if tc.whole && (said != 1 || !strings.Contains(logs.String(), s.URL)) || !tc.whole && said != 0 {
							t.Fatalf("store read whole %v, said %d times; log:\n%s", tc.whole, said, logs.String())
						}
						return
					}
					wantCode(t, err, tc.code)
					if waited := strings.Contains(err.Error(), "while the download waited for the network"); waited != strings.HasPrefix(tc.name, "always") {
						t.Fatalf("%v: waited for the network %v", err, waited)
					}
					t.Log(err)
					checkNotCorrupt(t, d, c)
				})
			}
		})
	}
}
