package slots

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otad/otad/ota"
)

func serveBytes(t testing.TB, data []byte) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"img"`)
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(data))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestWrite(t *testing.T) {
	const imgSize = 1<<20 + 12345 // not a multiple of any chunk size
	img := testImage(imgSize, 1)
	tests := []struct {
		name        string
		compression ota.Compression
		payload     func(t *testing.T, img []byte) []byte // what the server holds, before compression
		corrupt     func(b []byte) []byte                 // applied after compression
		size        int64                                 // manifest size; 0 → imgSize
		sha         string                                // manifest sha; "" → sha(img)
		slotSize    int                                   // 0 → 2*imgSize
		downloadMax func(payloadLen int) int64
		readback    bool
		wantCode    ota.Code
		wantIn      string // substring of the error
		untouched   bool   // the slot must not have been written at all
	}{
		{name: "none", compression: "none"},
		{name: "none readback", compression: "none", readback: true},
		{name: "gzip", compression: "gzip", readback: true},
		{name: "zstd", compression: "zstd", readback: true},
		{name: "xz", compression: "xz", readback: true},
		{name: "empty compression means none", compression: ""},
		{name: "exact slot size", compression: "none", slotSize: imgSize},
		{name: "download_size equal is fine", compression: "zstd", downloadMax: func(n int) int64 { return int64(n) }},
		{
			name: "short stream", compression: "none",
			payload:  func(_ *testing.T, img []byte) []byte { return img[:imgSize-1000] },
			wantCode: ota.CodeSizeMismatch, wantIn: "ends after 1059921 bytes",
		},
		{
			name: "short stream zstd", compression: "zstd",
			payload:  func(_ *testing.T, img []byte) []byte { return img[:imgSize/2] },
			wantCode: ota.CodeSizeMismatch,
		},
		{
			name: "long stream", compression: "none",
			payload:  func(_ *testing.T, img []byte) []byte { return append(append([]byte(nil), img...), 0) },
			wantCode: ota.CodeSizeMismatch, wantIn: "longer than manifest size",
		},
		{
			name: "long stream gzip", compression: "gzip",
			payload:  func(_ *testing.T, img []byte) []byte { return append(append([]byte(nil), img...), img[:5000]...) },
			wantCode: ota.CodeSizeMismatch,
		},
		{
			name: "hash mismatch", compression: "none", readback: true,
			sha:      strings.Repeat("ab", 32),
			wantCode: ota.CodeHashMismatch, wantIn: "manifest says " + strings.Repeat("ab", 32),
		},
		{
			name: "hash mismatch xz", compression: "xz",
			payload: func(_ *testing.T, img []byte) []byte {
				b := append([]byte(nil), img...)
				b[4097] ^= 1
				return b
			},
			wantCode: ota.CodeHashMismatch,
		},
		{
			name: "slot too small", compression: "none", slotSize: imgSize - 1,
			wantCode: ota.CodeSizeMismatch, wantIn: "holds 1060920 bytes", untouched: true,
		},
		{
			name: "download larger than download_size", compression: "gzip",
			downloadMax: func(n int) int64 { return int64(n) - 1 },
			wantCode:    ota.CodeDownloadFailed, wantIn: "download_size",
		},
		{
			name: "corrupt zstd", compression: "zstd",
			corrupt: func(b []byte) []byte {
				b = append([]byte(nil), b...)
				for i := 100; i < 200; i++ {
					b[i] ^= 0xff
				}
				return b
			},
			wantCode: ota.CodeDownloadFailed, wantIn: "decompress zstd",
		},
		{
			name: "not gzip at all", compression: "gzip",
			corrupt:  func(b []byte) []byte { return []byte("<html>not found</html>") },
			wantCode: ota.CodeDownloadFailed, wantIn: "decompress gzip", untouched: true,
		},
		{
			name: "unknown compression", compression: "bzip2",
			wantCode: ota.CodeDownloadFailed, wantIn: `"bzip2"`, untouched: true,
		},
		{
			name: "bad sha in job", compression: "none", sha: "xyz",
			wantCode: ota.CodeHashMismatch, wantIn: "not 64 hex", untouched: true,
		},
		{
			name: "negative size", compression: "none", size: -1,
			wantCode: ota.CodeSizeMismatch, untouched: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw := img
			if tt.payload != nil {
				raw = tt.payload(t, img)
			}
			comp := tt.compression
			if comp == "bzip2" {
				comp = "none"
			}
			body := compressed(t, raw, comp)
			if tt.corrupt != nil {
				body = tt.corrupt(body)
			}
			srv := serveBytes(t, body)
			slotSize := tt.slotSize
			if slotSize == 0 {
				slotSize = 2 * imgSize
			}
			slot := makeSlot(t, t.TempDir(), "slot-b", slotSize)
			size := tt.size
			if size == 0 {
				size = imgSize
			}
			sum := tt.sha
			if sum == "" {
				sum = sha(img)
			}
			var dl int64
			if tt.downloadMax != nil {
				dl = tt.downloadMax(len(body))
			}
			rec := &sleepRecorder{}
			job := Job{
				Payload: ota.Payload{URL: srv.URL + "/img", Compression: tt.compression, Size: size, SHA256: sum, DownloadSize: dl},
				Target:  File(slot), Readback: tt.readback, Retry: fastRetry(rec),
			}
			err := write(t.Context(), job, testTuning())
			if got := ota.CodeOf(err); got != tt.wantCode {
				t.Fatalf("Write() = %v (code %q), want code %q", err, got, tt.wantCode)
			}
			if tt.wantIn != "" && !strings.Contains(err.Error(), tt.wantIn) {
				t.Errorf("error %q does not contain %q", err, tt.wantIn)
			}
			if err != nil && !strings.HasPrefix(err.Error(), string(tt.wantCode)+": ") {
				t.Errorf("error %q does not start with its code", err)
			}
			if tt.wantCode == "" {
				checkSlot(t, slot, img, slotSize)
			}
			if tt.untouched {
				checkSlot(t, slot, nil, slotSize)
			}
			if d := rec.got(); len(d) != 0 {
				t.Errorf("slept %v; nothing here is transient", d)
			}
		})
	}
}

func TestWriteDefaultTuning(t *testing.T) {
	const imgSize = 9<<20 + 4096 + 17
	img := testImage(imgSize, 2)
	for _, comp := range []ota.Compression{"none", "zstd"} {
		for _, readback := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/readback=%v", comp, readback), func(t *testing.T) {
				srv := serveBytes(t, compressed(t, img, comp))
				slot := makeSlot(t, t.TempDir(), "slot", imgSize+1<<20)
				var last ota.Progress
				var phases []ota.Phase
				err := Write(t.Context(), Job{
					Payload: ota.Payload{URL: srv.URL, Compression: comp, Size: imgSize, SHA256: sha(img)}, Target: File(slot), Readback: readback,
					Progress: func(p ota.Progress) {
						if len(phases) == 0 || phases[len(phases)-1] != p.Phase {
							phases = append(phases, p.Phase)
						} else if p.BytesDone < last.BytesDone {
							t.Errorf("progress went back from %d to %d", last.BytesDone, p.BytesDone)
						}
						last = p
					},
				})
				if err != nil {
					t.Fatal(err)
				}
				checkSlot(t, slot, img, imgSize+1<<20)
				wantPhases := []ota.Phase{ota.Downloading}
				if readback {
					wantPhases = append(wantPhases, ota.Verifying)
				}
				if !slices.Equal(phases, wantPhases) {
					t.Errorf("phases %v, want %v", phases, wantPhases)
				}
				if last.BytesDone != imgSize || last.BytesTotal != imgSize {
					t.Errorf("last progress %+v, want %d of %d", last, imgSize, imgSize)
				}
				if last.BytesFetched != int64(len(compressed(t, img, comp))) {
					t.Errorf("downloaded %d, want %d", last.BytesFetched, len(compressed(t, img, comp)))
				}
			})
		}
	}
}

func TestWriteFileScheme(t *testing.T) {
	img := testImage(300_000, 3)
	dir := t.TempDir()
	src := filepath.Join(dir, "img.gz")
	if err := os.WriteFile(src, compressed(t, img, "gzip"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		url      string
		wantCode ota.Code
	}{
		{"absolute path", "file://" + src, ""},
		{"localhost host", "file://localhost" + src, ""},
		{"missing file", "file://" + filepath.Join(dir, "nope.gz"), ota.CodeDownloadFailed},
		{"remote host", "file://example.com" + src, ota.CodeDownloadFailed},
		{"unknown scheme", "ftp://example.com/img.gz", ota.CodeDownloadFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			slot := makeSlot(t, t.TempDir(), "slot", 400_000)
			err := write(t.Context(), Job{Payload: ota.Payload{URL: tt.url, Compression: "gzip", Size: int64(len(img)), SHA256: sha(img)}, Target: File(slot), Readback: true}, testTuning())
			if got := ota.CodeOf(err); got != tt.wantCode {
				t.Fatalf("Write() = %v, want code %q", err, tt.wantCode)
			}
			if tt.wantCode == "" {
				checkSlot(t, slot, img, 400_000)
			} else {
				checkSlot(t, slot, nil, 400_000)
			}
		})
	}
}

func TestWriteRefusesTarget(t *testing.T) {
	img := testImage(100_000, 4)
	srv := serveBytes(t, img)
	dir := t.TempDir()
	booted := makeSlot(t, dir, "slot-a", 200_000)
	link := filepath.Join(dir, "by-partlabel-a")
	if err := os.Symlink(booted, link); err != nil {
		t.Fatal(err)
	}
	hard := filepath.Join(dir, "hardlink-a")
	if err := os.Link(booted, hard); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "adir"), 0o700); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		target string
		wantIn string
	}{
		{"target is the booted slot", booted, "is the booted slot"},
		{"symlink to the booted slot", link, "is the booted slot"},
		{"hard link to the booted slot", hard, "is the booted slot"},
		{"missing target is not created", filepath.Join(dir, "slot-b"), "no such file"},
		{"directory", filepath.Join(dir, "adir"), "slot"},
		{"empty target", "", "no target"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := write(t.Context(), Job{Payload: ota.Payload{URL: srv.URL, Compression: "none", Size: int64(len(img)), SHA256: sha(img)}, Target: File(tt.target), Booted: File(booted)}, testTuning())
			if ota.CodeOf(err) != ota.CodeWriteFailed || !strings.Contains(err.Error(), tt.wantIn) {
				t.Fatalf("Write() = %v, want write_failed containing %q", err, tt.wantIn)
			}
			checkSlot(t, booted, nil, 200_000)
			if _, err := os.Stat(filepath.Join(dir, "slot-b")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("slot-b exists after the refused write: %v", err)
			}
		})
	}
}

// TestWriteExclusive runs two Writes at one target: the second to open it
// must fail at once with write_failed while the first goes on and succeeds.
func TestWriteExclusive(t *testing.T) {
	img := testImage(500_000, 5)
	release := make(chan struct{})
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(img))
	}))
	defer srv.Close()
	slot := makeSlot(t, t.TempDir(), "slot", 600_000)
	job := Job{Payload: ota.Payload{URL: srv.URL, Compression: "none", Size: int64(len(img)), SHA256: sha(img)}, Target: File(slot), Readback: true}
	results := make(chan error, 2)
	for range 2 {
		go func() { results <- write(t.Context(), job, testTuning()) }()
	}
	var first error
	select {
	case first = <-results:
	case <-time.After(10 * time.Second):
		t.Fatal("neither Write failed on the locked target")
	}
	if ota.CodeOf(first) != ota.CodeWriteFailed || !strings.Contains(first.Error(), "another process") {
		t.Fatalf("first result %v, want write_failed: another writer", first)
	}
	close(release)
	if err := <-results; err != nil {
		t.Fatalf("the lock holder failed: %v", err)
	}
	if n := requests.Load(); n != 1 {
		t.Errorf("%d requests, want 1: the refused writer must not download", n)
	}
	checkSlot(t, slot, img, 600_000)
}

func TestWriteCancel(t *testing.T) {
	img := testImage(4<<20, 6)
	started := make(chan struct{})
	handlerDone := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(handlerDone)
		w.Header().Set("Content-Length", "4194304")
		w.Write(img[:1<<20])
		w.(http.Flusher).Flush()
		close(started)
		<-r.Context().Done() // stall until the client goes away
	}))
	defer srv.Close()
	slot := makeSlot(t, t.TempDir(), "slot", 5<<20)
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		errc <- write(ctx, Job{Payload: ota.Payload{URL: srv.URL, Compression: "none", Size: int64(len(img)), SHA256: sha(img)}, Target: File(slot), Readback: true}, testTuning())
	}()
	<-started
	time.Sleep(100 * time.Millisecond)
	t0 := time.Now()
	cancel()
	var err error
	select {
	case err = <-errc:
	case <-time.After(5 * time.Second):
		t.Fatal("Write did not return within 5s of cancellation")
	}
	if ota.CodeOf(err) != ota.CodeCancelled {
		t.Fatalf("Write() = %v, want cancelled", err)
	}
	if d := time.Since(t0); d > 2*time.Second {
		t.Errorf("took %v to stop", d)
	}
	<-handlerDone
	before := readFile(t, slot)
	if bytes.Equal(before[:len(img)], img) {
		t.Fatal("the whole image got written despite the stall")
	}
	time.Sleep(100 * time.Millisecond)
	if !bytes.Equal(before, readFile(t, slot)) {
		t.Error("the slot changed after Write returned")
	}
}

func TestWriteAlreadyCancelled(t *testing.T) {
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { requests.Add(1) }))
	defer srv.Close()
	slot := makeSlot(t, t.TempDir(), "slot", 1000)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := Write(ctx, Job{Payload: ota.Payload{URL: srv.URL, Size: 10, SHA256: strings.Repeat("0", 64)}, Target: File(slot)})
	if ota.CodeOf(err) != ota.CodeCancelled {
		t.Fatalf("Write() = %v, want cancelled", err)
	}
	if requests.Load() != 0 {
		t.Error("a cancelled Write still downloaded")
	}
}

type readbackEvent struct {
	off, n, written int64
	direct          bool
}

func TestWriteReadback(t *testing.T) {
	const imgSize = 3<<20 + 777
	img := testImage(imgSize, 7)
	tests := []struct {
		name       string
		noDirect   bool
		corruptAt  int64 // corrupt the stored slot before this region is read back; -1 never
		wantCode   ota.Code
		wantDirect bool
	}{
		{"o_direct", false, -1, "", true},
		{"buffered fallback", true, -1, "", false},
		{"o_direct sees storage corruption", false, 1 << 20, ota.CodeReadbackMismatch, true},
		{"fallback sees storage corruption", true, 1 << 20, ota.CodeReadbackMismatch, false},
		{"corrupt last byte", false, imgSize - 1, ota.CodeReadbackMismatch, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := serveBytes(t, img)
			slot := makeSlot(t, t.TempDir(), "slot", imgSize+8192)
			var mu sync.Mutex
			var events []readbackEvent
			tun := testTuning()
			tun.noDirect = tt.noDirect
			var written atomic.Int64
			job := Job{Payload: ota.Payload{URL: srv.URL, Compression: "none", Size: imgSize, SHA256: sha(img)}, Target: File(slot), Readback: true,
				Progress: func(p ota.Progress) {
					if p.Phase == ota.Downloading {
						written.Store(p.BytesDone)
					}
				}}
			tun.beforeReadback = func(off, n int64, direct bool) {
				mu.Lock()
				events = append(events, readbackEvent{off: off, n: n, written: written.Load(), direct: direct})
				mu.Unlock()
				if tt.corruptAt >= off && tt.corruptAt < off+n {
					f, err := os.OpenFile(slot, os.O_WRONLY, 0)
					if err != nil {
						t.Error(err)
						return
					}
					defer f.Close()
					if _, err := f.WriteAt([]byte{^img[tt.corruptAt]}, tt.corruptAt); err != nil {
						t.Error(err)
					}
					if err := f.Sync(); err != nil {
						t.Error(err)
					}
				}
			}
			err := write(t.Context(), job, tun)
			if ota.CodeOf(err) != tt.wantCode {
				t.Fatalf("Write() = %v, want code %q", err, tt.wantCode)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(events) == 0 {
				t.Fatal("no readback happened")
			}
			var next int64
			for _, e := range events {
				if e.off != next || e.off%alignment != 0 {
					t.Fatalf("readback read %d bytes at %d, want the next aligned region at %d", e.n, e.off, next)
				}
				if e.direct != tt.wantDirect {
					t.Errorf("readback direct=%v, want %v", e.direct, tt.wantDirect)
				}
				next = e.off + e.n
			}
			if tt.wantCode == "" {
				if next != imgSize {
					t.Errorf("read back %d bytes, want %d", next, imgSize)
				}
				// Overlap: the first region is read back while the writer is
				// still far from the end, not in a second pass.
				if events[0].written >= imgSize {
					t.Errorf("first readback happened only after all %d bytes were written", imgSize)
				}
			}
		})
	}
}
