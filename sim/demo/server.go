package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"
)

// FileServer serves the files of one directory over HTTP on 127.0.0.1, with
// Range support, optionally throttled so the demo's progress bars have
// something to show.
type FileServer struct {
	// URL is the base URL: http://127.0.0.1:PORT
	URL string
	// Sent counts the body bytes sent, for what a device fetched.
	Sent *atomic.Int64
	srv  *http.Server
}

// StartFileServer serves dir; rate caps each response in bytes per second (0: no cap).
func StartFileServer(dir string, rate int64) (*FileServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("image server: %w", err)
	}
	sent := new(atomic.Int64)
	srv := &http.Server{Handler: fileHandler{dir: dir, rate: rate, sent: sent}, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln) // ends with Close
	return &FileServer{URL: "http://" + ln.Addr().String(), Sent: sent, srv: srv}, nil
}

// Close stops the server, bounded by ctx.
func (s *FileServer) Close(ctx context.Context) error {
	if err := s.srv.Shutdown(ctx); err != nil {
		s.srv.Close()
		return fmt.Errorf("image server: %w", err)
	}
	return nil
}

type fileHandler struct {
	dir  string
	rate int64
	sent *atomic.Int64
}

func (h fileHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/")
	// Flat directory: no path separators, nothing hidden (temp files).
	if name == "" || strings.ContainsAny(name, `/\`) || strings.HasPrefix(name, ".") {
		http.NotFound(w, r)
		return
	}
	f, err := os.Open(filepath.Join(h.dir, name))
	if errors.Is(err, os.ErrNotExist) {
		http.NotFound(w, r)
		return
	}
	if err != nil {
		http.Error(w, "cannot open", http.StatusInternalServerError)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		http.NotFound(w, r)
		return
	}
	var out http.ResponseWriter = counting{w, h.sent}
	if h.rate > 0 {
		out = &throttled{ResponseWriter: w, ctx: r.Context(), rate: h.rate}
	}
	http.ServeContent(out, r, name, st.ModTime(), f)
}

// counting counts what is sent.
type counting struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (c counting) Write(p []byte) (int, error) {
	n, err := c.ResponseWriter.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// ReadFrom sends a file (a whole one, or the one range of a Range request)
// with sendfile(2), as update servers do, still counted: without it the
// wrapper would hide the server's own ReadFrom, and every byte would be
// copied through this process, on the CPUs a benchmark shares with otad.
func (c counting) ReadFrom(r io.Reader) (int64, error) {
	rf, ok := c.ResponseWriter.(io.ReaderFrom)
	if !ok {
		return io.Copy(writerOnly{c}, r)
	}
	n, err := rf.ReadFrom(r)
	c.n.Add(n)
	return n, err
}

// writerOnly hides ReadFrom from io.Copy.
type writerOnly struct{ io.Writer }

// Flush lets buffered bytes out.
func (c counting) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// throttled paces the body at rate bytes per second.
type throttled struct {
	http.ResponseWriter
	ctx   context.Context
	rate  int64
	start time.Time
	sent  int64
}

// throttleChunk keeps the pacing smooth without a syscall per byte.
const throttleChunk = 32 << 10

func (t *throttled) Write(p []byte) (int, error) {
	if t.start.IsZero() {
		t.start = time.Now()
	}
	var n int
	for len(p) > 0 {
		c := p[:min(len(p), throttleChunk)]
		// Wait first: a chunk goes out when the rate allows all of it, so the
		// client sees the rate, not one chunk early.
		due := t.start.Add(time.Duration(float64(t.sent+int64(len(c))) / float64(t.rate) * float64(time.Second)))
		if wait := time.Until(due); wait > 0 {
			select {
			case <-time.After(wait):
			case <-t.ctx.Done():
				return n, t.ctx.Err()
			}
		}
		m, err := t.ResponseWriter.Write(c)
		n += m
		t.sent += int64(m)
		if err != nil {
			return n, err
		}
		p = p[m:]
	}
	return n, nil
}

// Flush lets the bytes out as they are paced.
func (t *throttled) Flush() {
	if f, ok := t.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
