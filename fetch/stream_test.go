package fetch

import (
	"bytes"
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otad/otad/backoff"
	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/tlsfiles"
)

// TestRetryBackoffDelays checks the delays are full jitter within the caps:
// rand * min(Max, Base*2^n).
func TestRetryBackoffDelays(t *testing.T) {
	tests := []struct {
		name       string
		retry      backoff.Policy
		rands      []float64
		retryAfter string
		want       []time.Duration
	}{
		{
			name:  "doubling caps, capped at max",
			retry: backoff.Policy{Attempts: 5, Base: 10 * time.Millisecond, Max: 25 * time.Millisecond},
			rands: []float64{0.5, 0.999, 0.25, 0},
			want:  []time.Duration{5 * time.Millisecond, 19980 * time.Microsecond, 6250 * time.Microsecond, 0},
		},
		{
			name:  "defaults are 3 attempts, 15s base, 5m cap",
			retry: backoff.Policy{},
			rands: []float64{0.5, 0.5},
			want:  []time.Duration{7500 * time.Millisecond, 15 * time.Second},
		},
		{
			name:       "Retry-After is a floor within the cap",
			retry:      backoff.Policy{Attempts: 3, Base: 10 * time.Millisecond, Max: 25 * time.Millisecond},
			rands:      []float64{0, 0},
			retryAfter: "1",
			want:       []time.Duration{25 * time.Millisecond, 25 * time.Millisecond},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var requests atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				requests.Add(1)
				if tt.retryAfter != "" {
					w.Header().Set("Retry-After", tt.retryAfter)
				}
				http.Error(w, "busy", http.StatusServiceUnavailable)
			}))
			defer srv.Close()
			rec := &sleeps{}
			i := 0
			tt.retry.Sleep = rec.sleep
			tt.retry.Rand = func() float64 { r := tt.rands[i%len(tt.rands)]; i++; return r }
			_, err := readAll(t, Request{URL: srv.URL, Retry: tt.retry})
			if ota.CodeOf(err) != ota.CodeDownloadFailed || !strings.Contains(err.Error(), "giving up after") {
				t.Fatalf("read = %v, want download_failed after the attempts", err)
			}
			got := rec.list()
			if len(got) != len(tt.want) {
				t.Fatalf("delays %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("delay %d = %v, want %v", i, got[i], tt.want[i])
				}
			}
			if n := requests.Load(); int(n) != len(tt.want)+1 {
				t.Errorf("%d requests, want %d", n, len(tt.want)+1)
			}
		})
	}
}

func TestStreamResumesStalledBody(t *testing.T) {
	img := testData(1<<20, 9)
	var mu sync.Mutex
	var ranges []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		ranges = append(ranges, r.Header.Get("Range"))
		first := len(ranges) == 1
		mu.Unlock()
		if first {
			w.Header().Set("Content-Length", strconv.Itoa(len(img)))
			w.Write(img[:300_000])
			w.(http.Flusher).Flush()
			<-r.Context().Done() // stall until the client gives up on us
			return
		}
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(img))
	}))
	defer srv.Close()
	got, err := readAll(t, Request{URL: srv.URL, Stall: 200 * time.Millisecond, Retry: quickRetry(&sleeps{})})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ranges) != 2 || ranges[1] != "bytes=300000-" {
		t.Errorf("Range headers %q, want a resume from 300000", ranges)
	}
	if !bytes.Equal(got, img) {
		t.Fatal("the resumed stream is not the payload")
	}
}

// Issue 9 (8): a server without Range support makes a resume download the
// bytes already written again; on a slow link that skip alone outlasts the
// stall timer, which must be re-armed as bytes flow.
func TestResumeWithoutRangeOnSlowLink(t *testing.T) {
	img := testData(1<<20+4096, 21)
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
	got, err := readAll(t, Request{URL: srv.URL, Stall: 150 * time.Millisecond, Retry: quickRetry(&sleeps{})})
	if err != nil {
		t.Fatalf("resume over a slow Range-less server: %v (%d requests)", err, requests.Load())
	}
	if !bytes.Equal(got, img) {
		t.Fatal("the resumed stream is not the payload")
	}
}

// Issue 9 (6): https-only is not bypassed by a redirect to http, redirect
// chains are bounded, and allowed redirects still work.
func TestRedirectPolicy(t *testing.T) {
	img := testData(200_000, 22)
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
	cases := []struct {
		name    string
		req     Request
		wantErr string
		hits    int32
	}{
		{"https to http, default policy", Request{URL: secure.URL + "/img", Client: secure.Client()}, "not allowed", 0},
		{"https to http, https only", Request{URL: secure.URL + "/img", Client: secure.Client(), Schemes: []string{"https"}}, "not allowed", 0},
		{"https to http, http allowed", Request{URL: secure.URL + "/img", Client: secure.Client(), Schemes: []string{"https", "http"}}, "", 1},
		{"endless redirects", Request{URL: plain.URL + "/loop0", Schemes: []string{"http"}}, "redirects", MaxRedirects + 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			plainHits.Store(0)
			c.req.Retry = quickRetry(&sleeps{})
			got, err := readAll(t, c.req)
			switch {
			case c.wantErr == "" && err != nil:
				t.Fatal(err)
			case c.wantErr == "" && !bytes.Equal(got, img):
				t.Fatal("the redirected download is not the payload")
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
	img := testData(100_000, 23)
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
	try := func(f tlsfiles.Files) error {
		tc, err := f.Config("")
		if err != nil {
			t.Fatal(err)
		}
		got, err := readAll(t, Request{URL: srv.URL + "/img", Client: NewHTTPClient(tc), Retry: quickRetry(&sleeps{})})
		if err == nil && !bytes.Equal(got, img) {
			t.Fatal("the download is not the payload")
		}
		return err
	}
	if err := try(tlsfiles.Files{}); ota.CodeOf(err) != ota.CodeDownloadFailed {
		t.Fatalf("system roots only: %v, want download_failed", err)
	}
	if err := try(tlsfiles.Files{CAFile: pki.CAFile}); ota.CodeOf(err) != ota.CodeDownloadFailed {
		t.Fatalf("no client certificate: %v, want download_failed", err)
	}
	if err := try(tlsfiles.Files{CAFile: pki.CAFile, CertFile: clientCert, KeyFile: clientKey}); err != nil {
		t.Fatalf("ca_file with cert_file and key_file: %v", err)
	}
}
