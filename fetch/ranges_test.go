package fetch

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otad/otad/ota"
)

// A download is bounded by Request.Limit, over HTTP and from files, and a
// file URL must name a local absolute path.
func TestLimitAndFileURLs(t *testing.T) {
	data := testData(10_000, 3)
	path := filepath.Join(t.TempDir(), "img")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(data))
	}))
	defer srv.Close()
	tests := []struct {
		name     string
		url      string
		limit    int64
		wantCode ota.Code
		wantIn   string
	}{
		{"http within the limit", srv.URL, int64(len(data)), "", ""},
		{"http over the limit", srv.URL, int64(len(data)) - 1, ota.CodeDownloadFailed, "exceeds the download limit"},
		{"file within the limit", "file://" + path, int64(len(data)), "", ""},
		{"file without a limit", "file://localhost" + path, 0, "", ""},
		{"file over the limit", "file://" + path, int64(len(data)) - 1, ota.CodeDownloadFailed, "larger than its limit"},
		{"remote file host", "file://example.com" + path, 0, ota.CodeDownloadFailed, "must be local"},
		{"missing file", "file://" + path + ".nope", 0, ota.CodeDownloadFailed, "no such file"},
		{"unknown scheme", "ftp://example.com/img", 0, ota.CodeDownloadFailed, "unsupported scheme"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var fetched atomic.Int64
			got, err := readAll(t, Request{URL: tt.url, Limit: tt.limit, Fetched: &fetched, Retry: quickRetry(&sleeps{})})
			if ota.CodeOf(err) != tt.wantCode || (err != nil && !strings.Contains(err.Error(), tt.wantIn)) {
				t.Fatalf("read = %v, want code %q containing %q", err, tt.wantCode, tt.wantIn)
			}
			if err == nil && (!bytes.Equal(got, data) || fetched.Load() != int64(len(data))) {
				t.Fatalf("read %d bytes (%d counted), want the %d of the payload", len(got), fetched.Load(), len(data))
			}
		})
	}
}

// OpenRanges reads exactly the ranges asked, from a file or a server that
// answers them; a server that ignores Range is ErrNoRanges, a resource of
// another size size_mismatch.
func TestOpenRanges(t *testing.T) {
	data := testData(50_000, 4)
	path := filepath.Join(t.TempDir(), "store")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	ranged := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(data))
	}))
	defer ranged.Close()
	whole := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		w.Write(data)
	}))
	defer whole.Close()
	for _, tt := range []struct {
		name    string
		url     string
		size    int64
		wantErr func(error) bool
	}{
		{"file", "file://" + path, int64(len(data)), nil},
		{"http", ranged.URL, int64(len(data)), nil},
		{"file of another size", "file://" + path, int64(len(data)) + 1, func(err error) bool {
			// Issue 27: no "(<nil>)" of an error that did not happen.
			return ota.CodeOf(err) == ota.CodeSizeMismatch && !strings.Contains(err.Error(), "<nil>")
		}},
		{"http of another size", ranged.URL, int64(len(data)) + 1, func(err error) bool { return ota.CodeOf(err) == ota.CodeSizeMismatch }},
		{"server ignoring Range", whole.URL, int64(len(data)), func(err error) bool { return errors.Is(err, ErrNoRanges) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var fetched atomic.Int64
			rs, err := OpenRanges(Request{URL: tt.url, Fetched: &fetched}, tt.size)
			if err == nil {
				defer rs.Close()
				var body io.ReadCloser
				if body, err = rs.Open(t.Context(), 1000, 7000); err == nil {
					got, rerr := io.ReadAll(body)
					body.Close()
					if rerr != nil || !bytes.Equal(got, data[1000:8000]) || fetched.Load() != 7000 {
						t.Fatalf("range [1000, 8000): %d bytes, %d counted, %v", len(got), fetched.Load(), rerr)
					}
				}
			}
			if tt.wantErr == nil && err != nil {
				t.Fatal(err)
			}
			if tt.wantErr != nil && (err == nil || !tt.wantErr(err)) {
				t.Fatalf("err = %v, not the one expected", err)
			}
		})
	}
}
