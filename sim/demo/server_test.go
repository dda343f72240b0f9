package demo

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func get(t *testing.T, url string, header map[string]string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

func TestFileServer(t *testing.T) {
	dir := t.TempDir()
	img := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
	for name, b := range map[string][]byte{"img.zst": img, ".hidden": img} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := StartFileServer(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	tests := []struct {
		path  string
		rng   string
		code  int
		bytes []byte
	}{
		{"/img.zst", "", http.StatusOK, img},
		{"/img.zst", "bytes=100-", http.StatusPartialContent, img[100:]},
		{"/absent", "", http.StatusNotFound, nil},
		{"/.hidden", "", http.StatusNotFound, nil},
		{"/sub", "", http.StatusNotFound, nil},
		{"/", "", http.StatusNotFound, nil},
		{"/sub/../img.zst", "", http.StatusNotFound, nil}, // a flat directory: no path in a name
	}
	var files int64
	for _, tt := range tests {
		h := map[string]string{}
		if tt.rng != "" {
			h["Range"] = tt.rng
		}
		code, b := get(t, s.URL+tt.path, h)
		if code != tt.code || (tt.bytes != nil && !bytes.Equal(b, tt.bytes)) {
			t.Errorf("GET %s (%s): %d, %d bytes; want %d", tt.path, tt.rng, code, len(b), tt.code)
		}
		if tt.bytes != nil {
			files += int64(len(b))
		}
	}
	if got := s.Sent.Load(); got != files {
		t.Errorf("Sent counts %d bytes, the files' bodies were %d", got, files)
	}
}

func TestFileServerThrottles(t *testing.T) {
	dir := t.TempDir()
	img := make([]byte, 128<<10)
	if err := os.WriteFile(filepath.Join(dir, "img"), img, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := StartFileServer(dir, 512<<10) // 128 KiB at 512 KiB/s: 250 ms
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	start := time.Now()
	code, b := get(t, s.URL+"/img", nil)
	took := time.Since(start)
	if code != http.StatusOK || len(b) != len(img) {
		t.Fatalf("%d, %d bytes", code, len(b))
	}
	if took < 200*time.Millisecond || took > 5*time.Second {
		t.Fatalf("128 KiB at 512 KiB/s took %v", took)
	}
}
