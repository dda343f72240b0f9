package fetch

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// h2Server is an HTTPS test server that offers HTTP/2 (as an update server
// or a CDN does), and a client with the [download] settings that trusts it.
func h2Server(t *testing.T, h http.Handler) (*httptest.Server, *http.Client) {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	c := NewHTTPClient(&tls.Config{RootCAs: pool})
	t.Cleanup(c.CloseIdleConnections)
	return srv, c
}

// Issue 30 item 4: payload fetches, streams and range requests alike, speak
// HTTP/1.1 to a server that offers HTTP/2, so that what otad has not read
// yet waits in the kernel's socket buffer, not in otad's heap (client.go).
func TestPayloadFetchesSpeakHTTP1(t *testing.T) {
	img := testData(300_000, 31)
	var mu sync.Mutex
	var protos []string
	srv, c := h2Server(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		protos = append(protos, r.Proto)
		mu.Unlock()
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(img))
	}))
	tests := []struct {
		name  string
		want  []byte
		fetch func(Request) ([]byte, error)
	}{
		{"stream", img, func(r Request) ([]byte, error) { return readAll(t, r) }},
		{"ranges", img[1000:201_000], func(r Request) ([]byte, error) {
			rs, err := OpenRanges(r, int64(len(img)))
			if err != nil {
				return nil, err
			}
			defer rs.Close()
			body, err := rs.Open(t.Context(), 1000, 200_000)
			if err != nil {
				return nil, err
			}
			defer body.Close()
			return io.ReadAll(body)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mu.Lock()
			protos = nil
			mu.Unlock()
			got, err := tt.fetch(Request{URL: srv.URL + "/img", Client: c, Retry: quickRetry(&sleeps{})})
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tt.want) {
				t.Fatal("the fetched bytes are not the payload's")
			}
			mu.Lock()
			defer mu.Unlock()
			if len(protos) != 1 || protos[0] != "HTTP/1.1" {
				t.Errorf("the server saw %q, want one HTTP/1.1 request", protos)
			}
		})
	}
}

// countingConn counts the bytes read off a connection, below TLS.
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// What the server sends and otad does not read yet stays in the kernel's
// socket buffers, where TCP holds the server back: four bodies opened and
// not read, the client takes no more than its read buffers off the sockets.
// (Over HTTP/2, Go's transport read a stream's window, 1 MiB, into each.)
func TestUnreadBodiesStayInTheKernel(t *testing.T) {
	const streams, body = 4, 16 << 20
	var sent atomic.Int64
	srv, c := h2Server(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, 16<<10)
		for n := 0; n < body; n += len(buf) {
			if _, err := w.Write(buf); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			sent.Add(int64(len(buf)))
		}
	}))
	var read atomic.Int64
	tr := c.Transport.(*http.Transport)
	dial := tr.DialContext
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{conn, &read}, nil
	}
	for range streams {
		resp, err := c.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
	}
	// Wait until the server is held back: nothing more sent for 300 ms.
	last, still := int64(-1), 0
	for deadline := time.Now().Add(30 * time.Second); still < 6 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		if n := sent.Load(); n != last {
			last, still = n, 0
			continue
		}
		still++
	}
	// A connection's handshake, headers, a TLS record (16 KiB) and the
	// transport's 4 KiB read buffer, with room to spare.
	const perConn = 64 << 10
	if n := read.Load(); n > streams*perConn {
		t.Errorf("the client read %d bytes of %d unread bodies off the sockets, more than %d a connection", n, streams, perConn)
	}
}

// A chunked install keeps three range requests in flight (slots' lanes):
// each on its own HTTP/1.1 connection, kept open from one range to the next,
// so that no range pays a new TCP and TLS handshake or TCP's slow start.
// Each round opens three ranges before reading any, then reads them all: the
// three connections are idle at once between rounds.
func TestRangesInFlightKeepTheirConnections(t *testing.T) {
	img := testData(1<<20, 37)
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(img))
	}))
	srv.EnableHTTP2 = true
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.StartTLS()
	defer srv.Close()
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	c := NewHTTPClient(&tls.Config{RootCAs: pool})
	defer c.CloseIdleConnections()
	rs, err := OpenRanges(Request{URL: srv.URL + "/store", Client: c}, int64(len(img)))
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	const lanes, rounds, span = ConnsKeptPerHost, 10, 16 << 10
	for k := range rounds {
		var bodies []io.ReadCloser
		for l := range lanes {
			body, err := rs.Open(t.Context(), int64((k*lanes+l)*span), span)
			if err != nil {
				t.Fatal(err)
			}
			defer body.Close()
			bodies = append(bodies, body)
		}
		for l, body := range bodies {
			off := (k*lanes + l) * span
			if b, err := io.ReadAll(body); err != nil || !bytes.Equal(b, img[off:off+span]) {
				t.Fatalf("range at %d: %d bytes, not the store's (%v)", off, len(b), err)
			}
			body.Close()
		}
	}
	if n := conns.Load(); n != lanes {
		t.Errorf("%d rounds of %d ranges in flight took %d connections, want %d", rounds, lanes, n, lanes)
	}
}
