package slots

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"hash/crc32"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ulikunitz/xz"

	"github.com/otad/otad/ota"
)

// xzWithDict returns an xz stream of data whose LZMA2 filter declares a
// dictionary of 2^(code/2+12) bytes, with the block header CRC fixed up.
func xzWithDict(t *testing.T, data []byte, code byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := xz.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(data)
	w.Close()
	b := buf.Bytes()
	hdr := b[12 : 12+(int(b[12])+1)*4]
	i := bytes.Index(hdr, []byte{0x21, 0x01})
	if i < 0 {
		t.Fatal("no LZMA2 filter in the block header")
	}
	hdr[i+2] = code
	binary.LittleEndian.PutUint32(hdr[len(hdr)-4:], crc32.ChecksumIEEE(hdr[:len(hdr)-4]))
	return b
}

// Issue 9 (7): the xz dictionary a stream declares must not size the
// decoder's memory; zstd windows are bounded the same way.
func TestDecoderMemoryCaps(t *testing.T) {
	img := testImage(300_000, 24)
	cases := []struct {
		name    string
		payload []byte
		comp    ota.Compression
		ok      bool
	}{
		{"xz 8 MiB dictionary", xzWithDict(t, img, 22), "xz", true},
		{"xz 1 GiB dictionary", xzWithDict(t, img, 36), "xz", false},
		{"xz 4 GiB dictionary", xzWithDict(t, img, 40), "xz", false},
	}
	dir := t.TempDir()
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := serveBytes(t, c.payload)
			err := write(t.Context(), Job{Payload: ota.Payload{URL: srv.URL, Compression: c.comp, Size: int64(len(img)), SHA256: sha(img)},
				Target: File(makeSlot(t, dir, "s"+strconv.Itoa(i), 1<<20)), Retry: fastRetry(&sleepRecorder{})}, testTuning())
			if c.ok && err != nil {
				t.Fatal(err)
			}
			if !c.ok && ota.CodeOf(err) != ota.CodeDownloadFailed {
				t.Fatalf("err = %v, want download_failed", err)
			}
		})
	}
}

// Issue 9 (7): without download_size, data that decodes to nothing (empty
// gzip members, zstd skippable frames) must not stream forever.
func TestEndlessDataIsCapped(t *testing.T) {
	img := testImage(100_000, 25)
	var emptyGzip bytes.Buffer
	zw := gzip.NewWriter(&emptyGzip)
	zw.Close()
	skippable := make([]byte, 8+64<<10)
	binary.LittleEndian.PutUint32(skippable, 0x184D2A50)
	binary.LittleEndian.PutUint32(skippable[4:], 64<<10)
	for _, c := range []struct {
		comp   ota.Compression
		filler []byte
	}{{"gzip", emptyGzip.Bytes()}, {"zstd", skippable}} {
		t.Run(string(c.comp), func(t *testing.T) {
			head := compressed(t, img, c.comp)
			var served atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Write(head) // no Content-Length: chunked, endless
				served.Add(int64(len(head)))
				for r.Context().Err() == nil && served.Load() < 1<<30 {
					var chunk bytes.Buffer
					for chunk.Len() < 64<<10 {
						chunk.Write(c.filler)
					}
					if _, err := w.Write(chunk.Bytes()); err != nil {
						return
					}
					served.Add(int64(chunk.Len()))
				}
			}))
			defer srv.Close()
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			err := write(ctx, Job{Payload: ota.Payload{URL: srv.URL, Compression: c.comp, Size: int64(len(img)), SHA256: sha(img)},
				Target: File(makeSlot(t, t.TempDir(), "slot", 1<<20)), Retry: fastRetry(&sleepRecorder{})}, testTuning())
			if ota.CodeOf(err) != ota.CodeDownloadFailed || !strings.Contains(err.Error(), "limit") {
				t.Fatalf("err = %v, want download_failed over the download limit", err)
			}
		})
	}
}
