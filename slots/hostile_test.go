package slots

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
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

	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/tlsfiles"
)

// Issue 9 (8): a server without Range support makes a resume download the
// bytes already written again; on a slow link that skip alone outlasts the
// stall timer, which must be re-armed as bytes flow.
func TestResumeWithoutRangeOnSlowLink(t *testing.T) {
	img := testImage(1<<20+4096, 21)
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := requests.Add(1)
		w.Header().Set("Content-Length", strconv.Itoa(len(img))) // Range ignored
		if n == 1 {
			w.Write(img[:900_000])
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}
		// 32 KiB every 15 ms: the 900 kB skip takes ~420 ms, the stall limit is 150 ms.
		for off := 0; off < len(img); off += 32 << 10 {
			if _, err := w.Write(img[off:min(off+32<<10, len(img))]); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			time.Sleep(15 * time.Millisecond)
		}
	}))
	defer srv.Close()
	slot := makeSlot(t, t.TempDir(), "slot", 2<<20)
	tun := testTuning()
	tun.stall = 150 * time.Millisecond
	err := write(t.Context(), Job{URL: srv.URL, Size: int64(len(img)), SHA256: sha(img), Target: slot, Retry: fastRetry(&sleepRecorder{})}, tun)
	if err != nil {
		t.Fatalf("resume over a slow Range-less server: %v (%d requests)", err, requests.Load())
	}
	checkSlot(t, slot, img, 2<<20)
}

// Issue 9 (6): https-only is not bypassed by a redirect to http, redirect
// chains are bounded, and allowed redirects still work.
func TestRedirectPolicy(t *testing.T) {
	img := testImage(200_000, 22)
	var plainHits atomic.Int32
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		plainHits.Add(1)
		if strings.HasPrefix(r.URL.Path, "/loop") {
			n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/loop"))
			http.Redirect(w, r, "/loop"+strconv.Itoa(n+1), http.StatusFound)
			return
		}
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(img))
	}))
	defer plain.Close()
	secure := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, plain.URL+"/img", http.StatusFound)
	}))
	defer secure.Close()
	dir := t.TempDir()
	cases := []struct {
		name    string
		job     Job
		wantErr string
		hits    int32
	}{
		{"https to http, default policy", Job{URL: secure.URL + "/img", HTTPClient: secure.Client()}, "not allowed", 0},
		{"https to http, https only", Job{URL: secure.URL + "/img", HTTPClient: secure.Client(), Schemes: []string{"https"}}, "not allowed", 0},
		{"https to http, http allowed", Job{URL: secure.URL + "/img", HTTPClient: secure.Client(), Schemes: []string{"https", "http"}}, "", 1},
		{"endless redirects", Job{URL: plain.URL + "/loop0", Schemes: []string{"http"}}, "redirects", maxRedirects + 1},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			plainHits.Store(0)
			c.job.Size, c.job.SHA256 = int64(len(img)), sha(img)
			c.job.Target = makeSlot(t, dir, "slot"+strconv.Itoa(i), 1<<20)
			c.job.Retry = fastRetry(&sleepRecorder{})
			err := write(t.Context(), c.job, testTuning())
			switch {
			case c.wantErr == "" && err != nil:
				t.Fatal(err)
			case c.wantErr != "" && (err == nil || ota.CodeOf(err) != ota.CodeDownloadFailed || !strings.Contains(err.Error(), c.wantErr)):
				t.Fatalf("err = %v, want download_failed mentioning %q", err, c.wantErr)
			}
			if got := plainHits.Load(); got != c.hits {
				t.Errorf("plain server hit %d times, want %d", got, c.hits)
			}
		})
	}
}

// Issue 9 (6): [download] ca_file trusts a fleet's own server; cert_file and
// key_file answer a server that wants a client certificate.
func TestDownloadTLSFiles(t *testing.T) {
	img := testImage(100_000, 23)
	pki := mosquittotest.NewPKI(t)
	certFile, keyFile := pki.Server(t, "127.0.0.1")
	clientCert, clientKey := pki.Client(t, "gw-0001")
	caTLS, err := tlsfiles.Files{Section: "download", CAFile: pki.CAFile}.Config("")
	if err != nil {
		t.Fatal(err)
	}
	srvCert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(img))
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{srvCert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: caTLS.RootCAs}
	srv.StartTLS()
	defer srv.Close()
	dir := t.TempDir()
	try := func(name string, f tlsfiles.Files) error {
		tc, err := f.Config("")
		if err != nil {
			t.Fatal(err)
		}
		return write(t.Context(), Job{URL: srv.URL + "/img", Size: int64(len(img)), SHA256: sha(img),
			Target: makeSlot(t, dir, name, 1<<20), HTTPClient: NewHTTPClient(tc), Retry: fastRetry(&sleepRecorder{})}, testTuning())
	}
	if err := try("system", tlsfiles.Files{}); ota.CodeOf(err) != ota.CodeDownloadFailed {
		t.Fatalf("system roots only: %v, want download_failed", err)
	}
	if err := try("nocert", tlsfiles.Files{CAFile: pki.CAFile}); ota.CodeOf(err) != ota.CodeDownloadFailed {
		t.Fatalf("no client certificate: %v, want download_failed", err)
	}
	if err := try("mtls", tlsfiles.Files{CAFile: pki.CAFile, CertFile: clientCert, KeyFile: clientKey}); err != nil {
		t.Fatalf("ca_file with cert_file and key_file: %v", err)
	}
}

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
			err := write(t.Context(), Job{URL: srv.URL, Compression: c.comp, Size: int64(len(img)), SHA256: sha(img),
				Target: makeSlot(t, dir, "s"+strconv.Itoa(i), 1<<20), Retry: fastRetry(&sleepRecorder{})}, testTuning())
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
			err := write(ctx, Job{URL: srv.URL, Compression: c.comp, Size: int64(len(img)), SHA256: sha(img),
				Target: makeSlot(t, t.TempDir(), "slot", 1<<20), Retry: fastRetry(&sleepRecorder{})}, testTuning())
			if ota.CodeOf(err) != ota.CodeDownloadFailed || !strings.Contains(err.Error(), "limit") {
				t.Fatalf("err = %v, want download_failed over the download limit", err)
			}
		})
	}
}
