package fetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/otad/otad/ota"
)

// Ranges reads byte ranges of a resource of known size (a chunked
// payload's store).
type Ranges interface {
	// Open returns a reader over exactly the bytes [off, off+n). Its errors,
	// and Open's, are *ota.Error when final, ErrNoRanges when the server
	// does not answer range requests as asked, and *TransientError
	// otherwise.
	Open(ctx context.Context, off, n int64) (io.ReadCloser, error)
	Close()
}

// ErrNoRanges: the server ignored Range (200), answered with several parts,
// or with another range than asked. The resource is then read from its
// start, skipping what is not needed, as a plain static server allows.
var ErrNoRanges = errors.New("the server does not answer single-range requests as asked")

// TransientError is a failure worth retrying: Status is the server's
// answer (5xx, 408, 429), with its Retry-After; 0 when the network failed
// (no answer, a body cut short or stalled).
type TransientError struct {
	Err    error
	Status int
	After  time.Duration
}

func (e *TransientError) Error() string { return e.Err.Error() }
func (e *TransientError) Unwrap() error { return e.Err }

// OpenRanges returns the ranges of r.URL, HTTP(S) or a local file, which
// must be size bytes (payload.chunks.store_size): a resource of another
// size is size_mismatch. r.Limit, r.Retry, r.Until and r.Waiting are not
// used: each range is bounded, and the caller retries (NewRetrier).
func OpenRanges(r Request, size int64) (Ranges, error) {
	return OpenRangesNamed(r, size, "payload.chunks.store_size")
}

// OpenRangesNamed is OpenRanges for a resource whose size the manifest's field
// names (a delta file's, payload.chunks.deltas[0].size): a size_mismatch names it.
func OpenRangesNamed(r Request, size int64, field string) (Ranges, error) {
	u, err := url.Parse(r.URL)
	if err != nil {
		return nil, ota.Wrap(ota.CodeDownloadFailed, fmt.Errorf("store url %q: %w", r.URL, err))
	}
	switch strings.ToLower(u.Scheme) {
	case "http", "https":
		client, own := r.client(u.Scheme)
		return &httpRanges{client: client, own: own, url: r.URL, size: size, field: field, stall: r.stall(), fetched: r.fetched()}, nil
	case "file":
		f, err := openFile(u, r.URL)
		if err != nil {
			return nil, err
		}
		st, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, ota.Wrap(ota.CodeDownloadFailed, fmt.Errorf("store %s: %w", r.URL, err))
		}
		if st.Size() != size {
			f.Close()
			return nil, ota.Errorf(ota.CodeSizeMismatch, "store %s is %d bytes, %s says %d", r.URL, st.Size(), field, size)
		}
		return &fileRanges{f: f, fetched: r.fetched()}, nil
	}
	return nil, ota.Wrap(ota.CodeDownloadFailed, fmt.Errorf("store url %q: unsupported scheme %q", r.URL, u.Scheme))
}

// httpRanges asks for one range per request and takes exactly that range.
type httpRanges struct {
	client  *http.Client
	own     bool
	url     string
	size    int64  // store_size
	field   string // the manifest's field that says size
	stall   time.Duration
	fetched *atomic.Int64
}

func (h *httpRanges) Close() {
	if h.own {
		h.client.CloseIdleConnections()
	}
}

func (h *httpRanges) Open(ctx context.Context, off, n int64) (io.ReadCloser, error) {
	reqCtx, cancel := context.WithCancel(ctx)
	req, err := http.NewRequestWithContext(reqCtx, http.MethodGet, h.url, nil)
	if err != nil {
		cancel()
		return nil, ota.Wrap(ota.CodeDownloadFailed, fmt.Errorf("store url %q: %w", h.url, err))
	}
	asked := "bytes=" + strconv.FormatInt(off, 10) + "-" + strconv.FormatInt(off+n-1, 10)
	req.Header.Set("Range", asked)
	// identity: a transparently gunzipped body would make the offsets wrong.
	req.Header.Set("Accept-Encoding", "identity")
	req.Header.Set("User-Agent", "otad")
	// The stall timer cancels a request whose headers or body stop coming.
	stalled := new(atomic.Bool)
	timer := time.AfterFunc(h.stall, func() { stalled.Store(true); cancel() })
	resp, err := h.client.Do(req)
	timer.Stop()
	if err != nil {
		cancel()
		err = fmt.Errorf("GET %s (%s): %w", h.url, asked, stallErr(stalled, h.stall, err))
		if isPermanentTransportError(err) {
			return nil, ota.Wrap(ota.CodeDownloadFailed, err)
		}
		return nil, &TransientError{Err: err}
	}
	if err := h.accept(resp, off, n, asked); err != nil {
		resp.Body.Close()
		cancel()
		return nil, err
	}
	return &rangeBody{r: resp.Body, left: n, timer: timer, stall: h.stall, stalled: stalled, cancel: cancel, fetched: h.fetched}, nil
}

// accept judges the answer to a request for [off, off+n).
func (h *httpRanges) accept(resp *http.Response, off, n int64, asked string) error {
	status := fmt.Errorf("GET %s (%s): HTTP %s", h.url, asked, resp.Status)
	cr := resp.Header.Get("Content-Range")
	start, end, total, ok := parseContentRange(cr)
	switch code := resp.StatusCode; {
	case code == http.StatusPartialContent:
		if ct := resp.Header.Get("Content-Type"); strings.HasPrefix(strings.ToLower(ct), "multipart/") {
			return fmt.Errorf("%w: a %s answer to %s", ErrNoRanges, ct, asked)
		}
		if total >= 0 && total != h.size {
			return h.sizeChanged(total, asked)
		}
		if !ok || start != off || end != off+n-1 || (resp.ContentLength >= 0 && resp.ContentLength != n) {
			return fmt.Errorf("%w: Content-Range %q (Content-Length %d) for %s", ErrNoRanges, cr, resp.ContentLength, asked)
		}
		return nil
	case code == http.StatusOK:
		if resp.ContentLength >= 0 && resp.ContentLength != h.size {
			return h.sizeChanged(resp.ContentLength, asked)
		}
		return fmt.Errorf("%w: HTTP 200 to %s", ErrNoRanges, asked)
	case code == http.StatusRequestedRangeNotSatisfiable:
		// The range lies inside store_size: the store is shorter than that.
		return h.sizeChanged(total, asked)
	case code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500:
		return &TransientError{Err: status, Status: code, After: parseRetryAfter(resp.Header.Get("Retry-After"))}
	}
	return ota.Wrap(ota.CodeDownloadFailed, status)
}

func (h *httpRanges) sizeChanged(total int64, asked string) error {
	have := "of unknown size"
	if total >= 0 {
		have = strconv.FormatInt(total, 10) + " bytes"
	}
	return ota.FieldErrorf(ota.CodeSizeMismatch, h.field, "%d, but store %s is %s (asked %s): it changed or is not this index's", h.size, h.url, have, asked)
}

// rangeBody is one range's body: exactly left bytes, then io.EOF; a body
// that ends early is io.ErrUnexpectedEOF. The stall timer runs only while a
// read waits, so a consumer that is slow to read is not taken for a stall.
type rangeBody struct {
	r       io.ReadCloser
	left    int64
	timer   *time.Timer
	stall   time.Duration
	stalled *atomic.Bool
	cancel  context.CancelFunc
	fetched *atomic.Int64
}

// stallErr says so when the stall timer ended a request.
func stallErr(stalled *atomic.Bool, stall time.Duration, err error) error {
	if stalled.Load() {
		return fmt.Errorf("no data for %s (stalled): %w", stall, err)
	}
	return err
}

func (b *rangeBody) Read(p []byte) (int, error) {
	if b.left == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	b.timer.Reset(b.stall)
	n, err := b.r.Read(p)
	b.timer.Stop()
	b.left -= int64(n)
	b.fetched.Add(int64(n))
	switch {
	case err == io.EOF && b.left > 0:
		return n, &TransientError{Err: fmt.Errorf("body ended with %d bytes of the range missing: %w", b.left, io.ErrUnexpectedEOF)}
	case err != nil && err != io.EOF:
		return n, &TransientError{Err: stallErr(b.stalled, b.stall, err)}
	}
	return n, err
}

func (b *rangeBody) Close() error {
	b.timer.Stop()
	err := b.r.Close()
	b.cancel()
	return err
}

// fileRanges reads a store from a local file (file:// URLs).
type fileRanges struct {
	f       *os.File
	fetched *atomic.Int64
}

func (s *fileRanges) Open(_ context.Context, off, n int64) (io.ReadCloser, error) {
	return io.NopCloser(&countingReader{r: io.NewSectionReader(s.f, off, n), n: s.fetched}), nil
}

func (s *fileRanges) Close() { s.f.Close() }

type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}
