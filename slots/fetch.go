package slots

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/otad/otad/internal/backoff"

	"github.com/otad/otad/ota"
)

// Retry is the retry policy for transient download errors (SPEC §6): up to
// Attempts tries of a request that makes no progress, sleeping a full-jitter
// delay rand[0, min(Max, Base*2^n)) before the n-th retry. A request that
// delivers bytes before failing resets the count, since it resumes from there.
// Zero fields take the SPEC defaults: 3 attempts, 15s base, 5m cap.
type Retry struct {
	Attempts  int
	Base, Max time.Duration
	// Sleep waits d or until ctx ends; nil uses a real timer.
	Sleep func(ctx context.Context, d time.Duration) error
	// Rand returns a uniform number in [0, 1); nil uses math/rand/v2.
	Rand func() float64
}

// SPEC §6 defaults.
const (
	defaultAttempts = 3
	defaultBase     = 15 * time.Second
	defaultMax      = 5 * time.Minute
	backoffFactor   = 2
)

func (r Retry) withDefaults() Retry {
	if r.Attempts <= 0 {
		r.Attempts = defaultAttempts
	}
	if r.Base <= 0 {
		r.Base = defaultBase
	}
	if r.Max <= 0 {
		r.Max = defaultMax
	}
	if r.Max < r.Base {
		r.Max = r.Base
	}
	if r.Sleep == nil {
		r.Sleep = sleepCtx
	}
	if r.Rand == nil {
		r.Rand = rand.Float64
	}
	return r
}

func (r Retry) policy() backoff.Policy {
	return backoff.Policy{Base: r.Base, Max: r.Max, Factor: backoffFactor}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// newDefaultClient has timeouts on each step that can hang (connect, TLS,
// response headers) but no overall timeout: a large image over a slow link
// legitimately takes hours. Body stalls are caught by the fetcher's idle timer.
func newDefaultClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		TLSHandshakeTimeout:   15 * time.Second,
		ResponseHeaderTimeout: 60 * time.Second,
		ExpectContinueTimeout: time.Second,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConns:          2,
	}}
}

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

// httpSource is an io.Reader over a payload URL that survives transient
// failures: a broken body is resumed with Range from the byte where it broke,
// so a decompressor reading from it never notices.
type httpSource struct {
	ctx       context.Context
	client    *http.Client
	ownClient bool
	url       string
	retry     Retry
	limit     int64 // Job.downloadLimit
	stall     time.Duration

	off       int64 // payload bytes delivered to the reader
	total     int64 // payload length when known, else -1
	validator string
	noRange   bool // the server answered a Range request wrongly
	eof       bool

	body       io.ReadCloser
	cancelReq  context.CancelFunc
	stallTimer *time.Timer

	fails      int // consecutive failed tries without progress
	lastErr    error
	retryAfter time.Duration
	downloaded *atomic.Int64
}

func (s *httpSource) Read(p []byte) (int, error) {
	for {
		if s.eof {
			return 0, io.EOF
		}
		if err := s.ctx.Err(); err != nil {
			s.closeBody()
			return 0, err
		}
		if s.body == nil {
			if err := s.connect(); err != nil {
				return 0, err
			}
			continue
		}
		if s.limit > 0 && int64(len(p)) > s.limit-s.off+1 {
			p = p[:s.limit-s.off+1]
		}
		n, err := s.body.Read(p)
		if n > 0 {
			s.off += int64(n)
			s.downloaded.Add(int64(n))
			s.fails = 0
			s.stallTimer.Reset(s.stall)
			if s.limit > 0 && s.off > s.limit {
				s.closeBody()
				return n, ota.Wrap(ota.CodeDownloadFailed, fmt.Errorf("payload %s is larger than its limit of %d bytes (download_size, or twice the image)", s.url, s.limit))
			}
		}
		switch {
		case err == nil:
			return n, nil
		case err == io.EOF && (s.total < 0 || s.off >= s.total):
			s.closeBody()
			s.eof = true
			return n, io.EOF
		}
		if cerr := s.ctx.Err(); cerr != nil {
			s.closeBody()
			return n, cerr
		}
		if err == io.EOF {
			err = fmt.Errorf("connection closed at byte %d of %d", s.off, s.total)
		}
		s.closeBody()
		s.fail(fmt.Errorf("read %s at byte %d: %w", s.url, s.off, err))
		if n > 0 {
			return n, nil
		}
	}
}

func (s *httpSource) Close() error {
	s.closeBody()
	if s.ownClient {
		s.client.CloseIdleConnections()
	}
	return nil
}

func (s *httpSource) closeBody() {
	if s.body != nil {
		s.body.Close()
		s.body = nil
	}
	if s.stallTimer != nil {
		s.stallTimer.Stop()
		s.stallTimer = nil
	}
	if s.cancelReq != nil {
		s.cancelReq()
		s.cancelReq = nil
	}
}

func (s *httpSource) fail(err error) {
	s.fails++
	s.lastErr = err
}

// connect (re)opens the body at s.off, sleeping the backoff delay first when
// the previous try failed.
func (s *httpSource) connect() error {
	for {
		if s.fails > 0 {
			if s.fails >= s.retry.Attempts {
				return ota.Wrap(ota.CodeDownloadFailed, fmt.Errorf("giving up after %d attempts: %w", s.fails, s.lastErr))
			}
			d := s.retry.policy().Delay(s.fails-1, s.retry.Rand())
			// Honour the server's Retry-After as a floor, within the cap.
			if ra := min(s.retryAfter, s.retry.Max); ra > d {
				d = ra
			}
			s.retryAfter = 0
			if err := s.retry.Sleep(s.ctx, d); err != nil {
				return err
			}
		}
		err := s.request()
		if err == nil {
			return nil
		}
		if cerr := s.ctx.Err(); cerr != nil {
			return cerr
		}
		var final *ota.Error
		if errors.As(err, &final) {
			return err
		}
		s.fail(err)
	}
}

// request sends one GET from s.off. It returns nil with s.body set (or s.eof),
// a *ota.Error when the failure is final, or another error when it is transient.
func (s *httpSource) request() error {
	reqCtx, cancel := context.WithCancel(s.ctx)
	req, err := http.NewRequestWithContext(reqCtx, http.MethodGet, s.url, nil)
	if err != nil {
		cancel()
		return ota.Wrap(ota.CodeDownloadFailed, fmt.Errorf("payload url %q: %w", s.url, err))
	}
	// identity: a transparently gunzipped body would make Range offsets wrong.
	req.Header.Set("Accept-Encoding", "identity")
	req.Header.Set("User-Agent", "otad")
	ranged := s.off > 0 && !s.noRange
	if ranged {
		req.Header.Set("Range", "bytes="+strconv.FormatInt(s.off, 10)+"-")
		if s.validator != "" {
			req.Header.Set("If-Range", s.validator)
		}
	}
	// The stall timer cancels the request when the body stops delivering; the
	// read then fails as transient and resumes.
	timer := time.AfterFunc(s.stall, cancel)
	resp, err := s.client.Do(req)
	if err != nil {
		timer.Stop()
		cancel()
		if isPermanentTransportError(err) {
			return ota.Wrap(ota.CodeDownloadFailed, fmt.Errorf("GET %s: %w", s.url, err))
		}
		return fmt.Errorf("GET %s: %w", s.url, err)
	}
	keep := false
	defer func() {
		if !keep {
			timer.Stop()
			resp.Body.Close()
			cancel()
		}
	}()
	status := fmt.Errorf("GET %s: HTTP %s", s.url, resp.Status)
	switch {
	case resp.StatusCode == http.StatusOK:
		if s.limit > 0 && resp.ContentLength > s.limit {
			return ota.Wrap(ota.CodeDownloadFailed, fmt.Errorf("GET %s: Content-Length %d exceeds the download limit %d (download_size, or twice the image)", s.url, resp.ContentLength, s.limit))
		}
		s.total = resp.ContentLength
		s.validator = validatorOf(resp.Header)
		if s.off > 0 {
			// The server ignored Range or the payload changed: skip to where
			// the stream broke (a changed payload then fails the hash check).
			if err := skipBody(resp.Body, s.off, timer, s.stall); err != nil {
				return fmt.Errorf("GET %s: skip %d bytes already written: %w", s.url, s.off, err)
			}
		}
	case resp.StatusCode == http.StatusPartialContent && ranged:
		start, end, total, ok := parseContentRange(resp.Header.Get("Content-Range"))
		if !ok || start != s.off {
			s.noRange = true
			return fmt.Errorf("GET %s: answered Range bytes=%d- with Content-Range %q", s.url, s.off, resp.Header.Get("Content-Range"))
		}
		s.total = end + 1
		if total >= 0 {
			s.total = total
		}
		if s.limit > 0 && s.total > s.limit {
			return ota.Wrap(ota.CodeDownloadFailed, fmt.Errorf("GET %s: length %d exceeds the download limit %d (download_size, or twice the image)", s.url, s.total, s.limit))
		}
	case resp.StatusCode == http.StatusRequestedRangeNotSatisfiable && ranged:
		_, _, total, _ := parseContentRange(resp.Header.Get("Content-Range"))
		if total == s.off {
			// The break came exactly at the end of the payload.
			s.eof = true
			return nil
		}
		s.noRange = true
		return fmt.Errorf("GET %s: range from byte %d not satisfiable: %w", s.url, s.off, status)
	case resp.StatusCode == http.StatusRequestTimeout || resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		s.retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"))
		return status
	default:
		return ota.Wrap(ota.CodeDownloadFailed, status)
	}
	keep = true
	s.body = resp.Body
	s.cancelReq = cancel
	s.stallTimer = timer
	return nil
}

// validatorOf returns what If-Range may carry: a strong ETag, else
// Last-Modified (weak ETags are not allowed in If-Range).
func validatorOf(h http.Header) string {
	if et := h.Get("ETag"); et != "" && !strings.HasPrefix(et, "W/") {
		return et
	}
	return h.Get("Last-Modified")
}

// parseContentRange parses "bytes START-END/TOTAL" (TOTAL may be "*", giving
// -1) and "bytes */TOTAL" (ok false, total set).
func parseContentRange(v string) (start, end, total int64, ok bool) {
	start, end, total = -1, -1, -1
	rest, found := strings.CutPrefix(strings.TrimSpace(v), "bytes ")
	if !found {
		return start, end, total, false
	}
	rng, tot, found := strings.Cut(rest, "/")
	if !found {
		return start, end, total, false
	}
	if tot != "*" {
		t, err := strconv.ParseInt(tot, 10, 64)
		if err != nil || t < 0 {
			return start, end, -1, false
		}
		total = t
	}
	a, b, found := strings.Cut(rng, "-")
	if !found {
		return start, end, total, false
	}
	s, err1 := strconv.ParseInt(a, 10, 64)
	e, err2 := strconv.ParseInt(b, 10, 64)
	if err1 != nil || err2 != nil || s < 0 || e < s || (total >= 0 && e >= total) {
		return -1, -1, total, false
	}
	return s, e, total, true
}

func parseRetryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if secs, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && secs > 0 {
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := time.Until(t); d > 0 {
			return d
		}
	}
	return 0
}

// isPermanentTransportError reports failures that retrying cannot fix:
// certificate problems and malformed requests.
func isPermanentTransportError(err error) bool {
	var (
		unknownAuth *x509.UnknownAuthorityError
		hostname    x509.HostnameError
		invalid     x509.CertificateInvalidError
		verify      *tls.CertificateVerificationError
		refused     *ota.Error // a redirect the policy refused
	)
	return errors.As(err, &unknownAuth) || errors.As(err, &hostname) ||
		errors.As(err, &invalid) || errors.As(err, &verify) || errors.As(err, &refused)
}
