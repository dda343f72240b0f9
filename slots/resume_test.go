package slots

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/otad/otad/ota"
)

// flakyServer serves data, cutting the connection after cutAfter bytes on the
// first request; later requests honour Range (unless ignoreRange) and fail
// with the queued statuses first.
type flakyServer struct {
	data        []byte
	cutAfter    int
	ignoreRange bool
	statuses    []int // answered in order before serving
	retryAfter  string

	mu       sync.Mutex
	requests int
	ranges   []string
	ifRanges []string
}

func (s *flakyServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.requests++
	n := s.requests
	s.ranges = append(s.ranges, r.Header.Get("Range"))
	s.ifRanges = append(s.ifRanges, r.Header.Get("If-Range"))
	var status int
	if len(s.statuses) > 0 {
		status, s.statuses = s.statuses[0], s.statuses[1:]
	}
	s.mu.Unlock()
	if status != 0 {
		if s.retryAfter != "" {
			w.Header().Set("Retry-After", s.retryAfter)
		}
		http.Error(w, http.StatusText(status), status)
		return
	}
	w.Header().Set("ETag", `"v1"`)
	if n == 1 && s.cutAfter > 0 || s.ignoreRange {
		w.Header().Set("Content-Length", strconv.Itoa(len(s.data)))
		w.WriteHeader(http.StatusOK)
		if n == 1 && s.cutAfter > 0 {
			w.Write(s.data[:s.cutAfter])
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler) // drop the connection mid-body
		}
		w.Write(s.data)
		return
	}
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(s.data))
}

func (s *flakyServer) log() (int, []string, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests, append([]string(nil), s.ranges...), append([]string(nil), s.ifRanges...)
}

func TestWriteRetryAndResume(t *testing.T) {
	const imgSize = 2<<20 + 999
	img := testImage(imgSize, 8)
	tests := []struct {
		name         string
		compression  ota.Compression
		cutAfter     int
		ignoreRange  bool
		statuses     []int
		attempts     int
		wantCode     ota.Code
		wantRequests int
		wantRanges   []string // Range header of each request
		wantSleeps   int
	}{
		{
			name: "resume none with Range", compression: "none", cutAfter: 700_001,
			wantRequests: 2, wantRanges: []string{"", "bytes=700001-"}, wantSleeps: 1,
		},
		{
			name: "resume zstd with Range feeds the same decoder", compression: "zstd", cutAfter: 100_003,
			wantRequests: 2, wantRanges: []string{"", "bytes=100003-"}, wantSleeps: 1,
		},
		{
			name: "resume gzip with Range", compression: "gzip", cutAfter: 50_000,
			wantRequests: 2, wantRanges: []string{"", "bytes=50000-"}, wantSleeps: 1,
		},
		{
			name: "server ignores Range: skip to the offset", compression: "none", cutAfter: 1_000_000, ignoreRange: true,
			wantRequests: 2, wantRanges: []string{"", "bytes=1000000-"}, wantSleeps: 1,
		},
		{
			name: "server ignores Range zstd", compression: "zstd", cutAfter: 70_000, ignoreRange: true,
			wantRequests: 2, wantRanges: []string{"", "bytes=70000-"}, wantSleeps: 1,
		},
		{
			name: "404 is final without retry", compression: "none", statuses: []int{404},
			wantCode: ota.CodeDownloadFailed, wantRequests: 1, wantRanges: []string{""},
		},
		{
			name: "403 is final", compression: "none", statuses: []int{403},
			wantCode: ota.CodeDownloadFailed, wantRequests: 1, wantRanges: []string{""},
		},
		{
			name: "503 then success", compression: "none", statuses: []int{503},
			wantRequests: 2, wantRanges: []string{"", ""}, wantSleeps: 1,
		},
		{
			name: "429 and 408 are transient", compression: "gzip", statuses: []int{429, 408},
			wantRequests: 3, wantRanges: []string{"", "", ""}, wantSleeps: 2,
		},
		{
			name: "5xx until attempts run out", compression: "none", statuses: []int{500, 502, 503, 504},
			wantCode: ota.CodeDownloadFailed, wantRequests: 3, wantRanges: []string{"", "", ""}, wantSleeps: 2,
		},
		{
			name: "cut then 503 then resume", compression: "zstd", cutAfter: 100_000, statuses: []int{0, 503},
			wantRequests: 3, wantRanges: []string{"", "bytes=100000-", "bytes=100000-"}, wantSleeps: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := compressed(t, img, tt.compression)
			fs := &flakyServer{data: body, cutAfter: tt.cutAfter, ignoreRange: tt.ignoreRange}
			for _, s := range tt.statuses {
				if s == 0 {
					continue // the cut request comes first
				}
				fs.statuses = append(fs.statuses, s)
			}
			if tt.cutAfter > 0 && len(tt.statuses) > 0 {
				// Serve the cut first, then the statuses.
				fs.statuses = append([]int{0}, fs.statuses...)
			}
			srv := httptest.NewServer(fs)
			defer srv.Close()
			slot := makeSlot(t, t.TempDir(), "slot", imgSize+100)
			rec := &sleepRecorder{}
			retry := fastRetry(rec)
			if tt.attempts > 0 {
				retry.Attempts = tt.attempts
			}
			err := write(t.Context(), Job{Payload: ota.Payload{URL: srv.URL, Compression: tt.compression, Size: imgSize, SHA256: sha(img)}, Target: File(slot), Readback: true, Retry: retry}, testTuning())
			if ota.CodeOf(err) != tt.wantCode {
				t.Fatalf("Write() = %v, want code %q", err, tt.wantCode)
			}
			n, ranges, ifRanges := fs.log()
			if n != tt.wantRequests {
				t.Errorf("%d requests, want %d", n, tt.wantRequests)
			}
			if strings.Join(ranges, "|") != strings.Join(tt.wantRanges, "|") {
				t.Errorf("Range headers %q, want %q", ranges, tt.wantRanges)
			}
			for i, r := range ranges {
				if r != "" && ifRanges[i] != `"v1"` {
					t.Errorf("request %d: If-Range %q, want the ETag", i, ifRanges[i])
				}
			}
			if d := rec.got(); len(d) != tt.wantSleeps {
				t.Errorf("slept %v, want %d sleeps", d, tt.wantSleeps)
			}
			if tt.wantCode == "" {
				checkSlot(t, slot, img, imgSize+100)
			} else if strings.Contains(err.Error(), "HTTP") && !strings.Contains(err.Error(), srv.URL) {
				t.Errorf("error %q does not name the URL", err)
			}
		})
	}
}
