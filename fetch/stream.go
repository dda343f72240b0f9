package fetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/otad/otad/ota"
)

// httpSource is an io.Reader over a payload URL that survives transient
// failures: a broken body is resumed with Range from the byte where it broke,
// so a decompressor reading from it never notices.
type httpSource struct {
	ctx       context.Context
	client    *http.Client
	ownClient bool
	url       string
	retry     *Retrier
	limit     int64 // Request.Limit
	stall     time.Duration

	off       int64 // payload bytes delivered to the reader
	total     int64 // payload length when known, else -1
	validator string
	noRange   bool // the server answered a Range request wrongly
	eof       bool

	body       io.ReadCloser
	cancelReq  context.CancelFunc
	stallTimer *time.Timer
	stalled    atomic.Bool // the stall timer cancelled the request

	lastErr    error // the last try's, nil when it delivered
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
			s.retry.Progress()
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
		err = stallErr(&s.stalled, s.stall, err)
		s.closeBody()
		// A body that breaks or stalls is the network's failure.
		s.lastErr = &TransientError{Err: fmt.Errorf("read %s at byte %d: %w", s.url, s.off, err)}
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

// connect (re)opens the body at s.off, after the retrier's wait when the
// previous try failed.
func (s *httpSource) connect() error {
	for {
		if s.lastErr != nil {
			err := s.lastErr
			s.lastErr = nil
			if err := s.retry.Retry(s.ctx, err); err != nil {
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
		s.lastErr = err
	}
}

// request sends one GET from s.off. It returns nil with s.body set (or s.eof),
// a *ota.Error when the failure is final, or another error when it is transient.
func (s *httpSource) request() error {
	reqCtx, cancel := context.WithCancel(s.ctx)
	req, ranged, err := s.newRequest(reqCtx)
	if err != nil {
		cancel()
		return err
	}
	// The stall timer cancels the request when the body stops delivering; the
	// read then fails as transient and resumes.
	s.stalled.Store(false)
	timer := time.AfterFunc(s.stall, func() { s.stalled.Store(true); cancel() })
	resp, err := s.client.Do(req)
	if err != nil {
		timer.Stop()
		cancel()
		if isPermanentTransportError(err) {
			return ota.Wrap(ota.CodeDownloadFailed, fmt.Errorf("GET %s: %w", s.url, err))
		}
		return &TransientError{Err: fmt.Errorf("GET %s: %w", s.url, stallErr(&s.stalled, s.stall, err))}
	}
	if err := s.accept(resp, ranged, timer); err != nil || s.eof {
		timer.Stop()
		resp.Body.Close()
		cancel()
		return err
	}
	s.body, s.cancelReq, s.stallTimer = resp.Body, cancel, timer
	s.retry.Answered()
	return nil
}

// newRequest is the GET from s.off: ranged (with If-Range) when resuming.
func (s *httpSource) newRequest(ctx context.Context) (req *http.Request, ranged bool, err error) {
	req, err = http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return nil, false, ota.Wrap(ota.CodeDownloadFailed, fmt.Errorf("payload url %q: %w", s.url, err))
	}
	// identity: a transparently gunzipped body would make Range offsets wrong.
	req.Header.Set("Accept-Encoding", "identity")
	req.Header.Set("User-Agent", "otad")
	ranged = s.off > 0 && !s.noRange
	if ranged {
		req.Header.Set("Range", "bytes="+strconv.FormatInt(s.off, 10)+"-")
		if s.validator != "" {
			req.Header.Set("If-Range", s.validator)
		}
	}
	return req, ranged, nil
}

// accept judges the response to a GET from s.off and takes the payload's
// length (and validator) from it; nil means its body continues at s.off
// (or, with s.eof, that nothing is left).
func (s *httpSource) accept(resp *http.Response, ranged bool, timer *time.Timer) error {
	status := fmt.Errorf("GET %s: HTTP %s", s.url, resp.Status)
	switch {
	case resp.StatusCode == http.StatusOK:
		return s.acceptWhole(resp, timer)
	case resp.StatusCode == http.StatusPartialContent && ranged:
		return s.acceptPartial(resp)
	case resp.StatusCode == http.StatusRequestedRangeNotSatisfiable && ranged:
		_, _, total, _ := parseContentRange(resp.Header.Get("Content-Range"))
		if total == s.off {
			// The break came exactly at the end of the payload.
			s.eof = true
			return nil
		}
		s.noRange = true
		return &TransientError{Err: fmt.Errorf("GET %s: range from byte %d not satisfiable: %w", s.url, s.off, status), Status: resp.StatusCode}
	case resp.StatusCode == http.StatusRequestTimeout || resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return &TransientError{Err: status, Status: resp.StatusCode, After: parseRetryAfter(resp.Header.Get("Retry-After"))}
	default:
		return ota.Wrap(ota.CodeDownloadFailed, status)
	}
}

// acceptWhole takes a 200: the whole payload, from byte 0.
func (s *httpSource) acceptWhole(resp *http.Response, timer *time.Timer) error {
	if s.limit > 0 && resp.ContentLength > s.limit {
		return ota.Wrap(ota.CodeDownloadFailed, fmt.Errorf("GET %s: Content-Length %d exceeds the download limit %d (download_size, or twice the image)", s.url, resp.ContentLength, s.limit))
	}
	s.total = resp.ContentLength
	s.validator = validatorOf(resp.Header)
	if s.off > 0 {
		// The server ignored Range or the payload changed: skip to where
		// the stream broke (a changed payload then fails the hash check).
		if err := skipBody(resp.Body, s.off, timer, s.stall); err != nil {
			return &TransientError{Err: fmt.Errorf("GET %s: skip %d bytes already written: %w", s.url, s.off, err)}
		}
	}
	return nil
}

// acceptPartial takes a 206, which must start where the stream broke.
func (s *httpSource) acceptPartial(resp *http.Response) error {
	start, end, total, ok := parseContentRange(resp.Header.Get("Content-Range"))
	if !ok || start != s.off {
		s.noRange = true
		return &TransientError{Err: fmt.Errorf("GET %s: answered Range bytes=%d- with Content-Range %q", s.url, s.off, resp.Header.Get("Content-Range")), Status: resp.StatusCode}
	}
	s.total = end + 1
	if total >= 0 {
		s.total = total
	}
	if s.limit > 0 && s.total > s.limit {
		return ota.Wrap(ota.CodeDownloadFailed, fmt.Errorf("GET %s: length %d exceeds the download limit %d (download_size, or twice the image)", s.url, s.total, s.limit))
	}
	return nil
}
