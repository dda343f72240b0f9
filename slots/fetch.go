package slots

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"sync/atomic"

	"github.com/otad/otad/ota"
)

// openSource returns the payload's download stream: a resuming HTTP reader or
// a local file. Reads return *ota.Error for final failures, the context's error
// when cancelled, and io.EOF at the end of the payload.
func openSource(ctx context.Context, job *Job, tun *tuning, downloaded *atomic.Int64) (io.ReadCloser, error) {
	u, err := url.Parse(job.URL)
	if err != nil {
		return nil, ota.Wrap(ota.CodeDownloadFailed, fmt.Errorf("payload url %q: %w", job.URL, err))
	}
	switch strings.ToLower(u.Scheme) {
	case "http", "https":
		client := job.HTTPClient
		if client == nil {
			client = newDefaultClient()
		}
		return &httpSource{
			ctx:        ctx,
			client:     withRedirectPolicy(client, job.allowedSchemes(u.Scheme)),
			ownClient:  job.HTTPClient == nil,
			url:        job.URL,
			retry:      job.Retry.withDefaults(),
			limit:      job.downloadLimit(),
			stall:      tun.stall,
			total:      -1,
			downloaded: downloaded,
		}, nil
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return nil, ota.Wrap(ota.CodeDownloadFailed, fmt.Errorf("payload url %q: file URLs must be local (file:///path)", job.URL))
		}
		if u.Path == "" || !strings.HasPrefix(u.Path, "/") {
			return nil, ota.Wrap(ota.CodeDownloadFailed, fmt.Errorf("payload url %q: file URL needs an absolute path", job.URL))
		}
		f, err := os.Open(u.Path)
		if err != nil {
			return nil, ota.Wrap(ota.CodeDownloadFailed, fmt.Errorf("payload url %q: %w", job.URL, err))
		}
		return &fileSource{ctx: ctx, f: f, url: job.URL, limit: job.downloadLimit(), downloaded: downloaded}, nil
	}
	return nil, ota.Wrap(ota.CodeDownloadFailed, fmt.Errorf("payload url %q: unsupported scheme %q", job.URL, u.Scheme))
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
