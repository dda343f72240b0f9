package fetch

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// TestHTTP2BuffersAtMostItsWindows: over HTTP/2, what the server sends and
// otad does not read yet lands in otad's heap, not in the kernel's socket
// buffer. Four bodies opened and not read: the server gets at most a stream's
// window into each and a connection's window into all (Go's defaults, 4 MiB
// a stream and 1 GiB a connection, let 16 MiB through here).
func TestHTTP2BuffersAtMostItsWindows(t *testing.T) {
	const streams = 4
	var sent [streams]atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := int(r.URL.Query().Get("i")[0] - '0')
		buf := make([]byte, 16<<10)
		for n := 0; n < 16<<20; n += len(buf) {
			if _, err := w.Write(buf); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			sent[i].Add(int64(len(buf)))
		}
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	c := NewHTTPClient(&tls.Config{RootCAs: pool})
	defer c.CloseIdleConnections()

	for i := range streams {
		resp, err := c.Get(srv.URL + "/?i=" + string(rune('0'+i)))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.ProtoMajor != 2 {
			t.Fatalf("%s, want HTTP/2", resp.Proto)
		}
	}
	total := func() (n int64) {
		for i := range sent {
			n += sent[i].Load()
		}
		return n
	}
	// Wait until the server is held back: nothing more sent for 300 ms.
	last, still := int64(-1), 0
	for deadline := time.Now().Add(30 * time.Second); still < 6 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		if n := total(); n != last {
			last, still = n, 0
			continue
		}
		still++
	}
	// The server's own buffers hold a few frames beyond the windows.
	const slack = 128 << 10
	for i := range sent {
		if n := sent[i].Load(); n > h2StreamWindow+slack {
			t.Errorf("stream %d: the server sent %d bytes nobody read, more than the window of %d", i, n, h2StreamWindow)
		}
	}
	if n := total(); n > h2ConnWindow+streams*slack {
		t.Errorf("the server sent %d bytes nobody read on one connection, more than its window of %d", n, h2ConnWindow)
	}
}
