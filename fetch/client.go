package fetch

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/otad/otad/ota"
)

// MaxRedirects bounds a URL's redirect chain.
const MaxRedirects = 5

// NewHTTPClient is the download client with the [download] TLS settings: tc
// carries the fleet's CA and the client certificate (nil: system roots).
func NewHTTPClient(tc *tls.Config) *http.Client {
	c := newDefaultClient()
	if tc != nil {
		c.Transport.(*http.Transport).TLSClientConfig = tc
	}
	return c
}

// allowedSchemes are the schemes a URL and every redirect may use: the
// configured ones, or without them the URL's own scheme and https.
func allowedSchemes(configured []string, scheme string) []string {
	if len(configured) > 0 {
		return configured
	}
	return []string{strings.ToLower(scheme), "https"}
}

// withRedirectPolicy returns a copy of c that checks every redirect against
// allowed and stops after MaxRedirects: https-only must not be bypassed by a
// server (or a man in the middle of a plain hop) answering 302 to http://.
func withRedirectPolicy(c *http.Client, allowed []string) *http.Client {
	cp := *c
	cp.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if len(via) > MaxRedirects {
			return ota.Wrap(ota.CodeDownloadFailed, fmt.Errorf("GET %s: more than %d redirects", via[0].URL.Redacted(), MaxRedirects))
		}
		if !slices.ContainsFunc(allowed, func(s string) bool { return strings.EqualFold(s, req.URL.Scheme) }) {
			return ota.Wrap(ota.CodeDownloadFailed, fmt.Errorf("GET %s: redirect to %s: scheme %q not allowed (allowed: %s)",
				via[0].URL.Redacted(), req.URL.Redacted(), req.URL.Scheme, strings.Join(allowed, ", ")))
		}
		return nil
	}
	return &cp
}

// skipBody discards the first n bytes of a body that ignored Range, the part
// already written, re-arming the stall timer as bytes arrive: on a slow link
// the skip alone can take longer than the stall limit.
func skipBody(body io.Reader, n int64, timer *time.Timer, stall time.Duration) error {
	buf := make([]byte, 32<<10)
	for n > 0 {
		m, err := body.Read(buf[:min(int64(len(buf)), n)])
		n -= int64(m)
		if m > 0 {
			timer.Reset(stall)
		}
		if n == 0 {
			return nil
		}
		if err == io.EOF {
			return io.ErrUnexpectedEOF
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// ConnsKeptPerHost is how many idle connections the download client keeps
// open to a host: a chunked install's range requests in flight (slots: its
// lanes), each on its own HTTP/1.1 connection, must not outnumber them, or
// every range past them pays a TCP and TLS handshake and TCP's slow start.
const ConnsKeptPerHost = 3

// maxIdleConns keeps those of two hosts: a delta file may be served apart
// from the store.
const maxIdleConns = 2 * ConnsKeptPerHost

// payloadProtocols is HTTP/1.1 alone, even to a server that offers HTTP/2
// (issue 30 item 4, docs/contract/installing.md). Over HTTP/1.1 what the
// server sent and otad has not read yet waits in the kernel's socket buffer,
// and TCP's flow control holds the server back when the decoder or the slot
// lags the link; over HTTP/2 Go's transport reads it into otad's heap, up to
// the flow-control window. A window small enough for the device's memory
// budget caps the link instead: 256 KiB a request is 21 Mbit/s on a link of
// 100 ms; 1 MiB a request (3 MiB a connection) still took HTTPS installs
// past 16 MiB of RSS (docs/design.md).
func payloadProtocols() *http.Protocols {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	return p
}

// newDefaultClient has timeouts on each step that can hang (connect, TLS,
// response headers) but no overall timeout: a large image over a slow link
// legitimately takes hours. Body stalls are caught by the fetcher's idle timer.
func newDefaultClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		Protocols:             payloadProtocols(),
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   15 * time.Second,
		ResponseHeaderTimeout: 60 * time.Second,
		ExpectContinueTimeout: time.Second,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConns:          maxIdleConns,
		MaxIdleConnsPerHost:   ConnsKeptPerHost,
	}}
}
