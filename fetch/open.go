package fetch

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/otad/otad/backoff"
	"github.com/otad/otad/ota"
)

// Request is one download.
type Request struct {
	URL string
	// Limit bounds the bytes fetched; a longer download fails with
	// download_failed. 0: no bound.
	Limit int64
	// Retry is the policy for transient failures; zero fields take the
	// [download] defaults (WithRetryDefaults).
	Retry backoff.Policy
	// Until is how long a download waits for a network that is gone (the
	// offer's expires_at); zero: as long as the context lives.
	Until time.Time
	// Waiting, when set, is told each wait for the network, and nil once
	// bytes arrive again (Retrier).
	Waiting func(*ota.Waiting)
	// Schemes are the URL schemes every redirect may use ([download]
	// schemes); empty allows the URL's own scheme and https.
	Schemes []string
	// Client nil uses NewHTTPClient(nil), whose idle connections are closed
	// with the download.
	Client *http.Client
	// Stall is how long a body may deliver nothing before it is given up
	// (and a stream resumed); 0: 60s.
	Stall time.Duration
	// Fetched, when set, counts the bytes fetched, as they arrive.
	Fetched *atomic.Int64
}

const defaultStall = 60 * time.Second

func (r Request) stall() time.Duration {
	if r.Stall > 0 {
		return r.Stall
	}
	return defaultStall
}

func (r Request) fetched() *atomic.Int64 {
	if r.Fetched != nil {
		return r.Fetched
	}
	return new(atomic.Int64)
}

// client returns the client to use with the redirect policy, and whether
// it is the download's own.
func (r Request) client(scheme string) (*http.Client, bool) {
	c := r.Client
	if c == nil {
		c = newDefaultClient()
	}
	return withRedirectPolicy(c, allowedSchemes(r.Schemes, scheme)), r.Client == nil
}

// Open returns the download stream of r.URL: a resuming HTTP reader or a
// local file. Reads return *ota.Error for final failures, the context's
// error when cancelled, and io.EOF at the end.
func Open(ctx context.Context, r Request) (io.ReadCloser, error) {
	u, err := url.Parse(r.URL)
	if err != nil {
		return nil, ota.Wrap(ota.CodeDownloadFailed, fmt.Errorf("payload url %q: %w", r.URL, err))
	}
	switch strings.ToLower(u.Scheme) {
	case "http", "https":
		client, own := r.client(u.Scheme)
		return &httpSource{
			ctx:        ctx,
			client:     client,
			ownClient:  own,
			url:        r.URL,
			retry:      NewRetrier(r),
			limit:      r.Limit,
			stall:      r.stall(),
			total:      -1,
			downloaded: r.fetched(),
		}, nil
	case "file":
		f, err := openFile(u, r.URL)
		if err != nil {
			return nil, err
		}
		return &fileSource{ctx: ctx, f: f, url: r.URL, limit: r.Limit, downloaded: r.fetched()}, nil
	}
	return nil, ota.Wrap(ota.CodeDownloadFailed, fmt.Errorf("payload url %q: unsupported scheme %q", r.URL, u.Scheme))
}

// openFile opens the local file of a file:// URL.
func openFile(u *url.URL, raw string) (*os.File, error) {
	if u.Host != "" && u.Host != "localhost" {
		return nil, ota.Wrap(ota.CodeDownloadFailed, fmt.Errorf("payload url %q: file URLs must be local (file:///path)", raw))
	}
	if u.Path == "" || !strings.HasPrefix(u.Path, "/") {
		return nil, ota.Wrap(ota.CodeDownloadFailed, fmt.Errorf("payload url %q: file URL needs an absolute path", raw))
	}
	f, err := os.Open(u.Path)
	if err != nil {
		return nil, ota.Wrap(ota.CodeDownloadFailed, fmt.Errorf("payload url %q: %w", raw, err))
	}
	return f, nil
}

// fileSource reads a local payload; local I/O errors are not transient.
type fileSource struct {
	ctx        context.Context
	f          *os.File
	url        string
	limit      int64
	off        int64
	downloaded *atomic.Int64
}

func (s *fileSource) Read(p []byte) (int, error) {
	if err := s.ctx.Err(); err != nil {
		return 0, err
	}
	if s.limit > 0 && int64(len(p)) > s.limit-s.off+1 {
		p = p[:s.limit-s.off+1]
	}
	n, err := s.f.Read(p)
	s.off += int64(n)
	s.downloaded.Add(int64(n))
	if s.limit > 0 && s.off > s.limit {
		return n, ota.Wrap(ota.CodeDownloadFailed, fmt.Errorf("payload %s is larger than its limit of %d bytes (download_size, or twice the image)", s.url, s.limit))
	}
	if err != nil && err != io.EOF {
		return n, ota.Wrap(ota.CodeDownloadFailed, fmt.Errorf("read payload %s at byte %d: %w", s.url, s.off, err))
	}
	return n, err
}

func (s *fileSource) Close() error { return s.f.Close() }
