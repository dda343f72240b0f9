package slots

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/otad/otad/backoff"
	"github.com/otad/otad/fetch"
	"github.com/otad/otad/ota"
)

// Job describes one payload and where it goes.
type Job struct {
	// Payload is the image (docs/contract/formats.md). Write uses its URL,
	// Compression, Size, SHA256 and DownloadSize; a ChunkedJob its Size and
	// SHA256, and the store's URL.
	ota.Payload

	// Target is the inactive slot.
	Target Target
	// Booted is the booted slot: a File that is it is refused as Target,
	// and a chunked install reuses its chunks; nil when unknown.
	Booted Target
	// Readback reads the slot back from storage (not the page cache) and
	// hashes it again.
	Readback bool
	// Retry is the policy for transient download errors; zero fields take
	// the [download] defaults (fetch.WithRetryDefaults).
	Retry backoff.Policy
	// Until is the offer's expires_at: a download that lost the network
	// waits for it until then (fetch.Retrier); zero: as long as ctx lives.
	Until time.Time
	// Schemes are the URL schemes every redirect may use ([download]
	// schemes); empty allows the payload URL's own scheme and https.
	Schemes []string
	// HTTPClient nil uses a client with connect, TLS and header timeouts and
	// no overall timeout.
	HTTPClient *http.Client
	// Progress, when set, is called at most every 250 ms, at the end of
	// each phase, and when a wait for the network starts or ends (its
	// Waiting); it must not block.
	Progress func(ota.Progress)
	// Pipelined, when set, is called as the write of a compressed stream
	// starts, whose decoder has CPU work to do while the slot's writes wait
	// for the storage, and the func it returns once the write is over. Not
	// for a raw stream, whose hash is most of its CPU, nor by WriteChunked.
	// On a one-CPU device otad gives the Go runtime a second P meanwhile
	// (device/procs.go).
	Pipelined func() (end func())

	waits *waitReports // set by Write and WriteChunked when Progress is
}

// waitReports keeps the last progress report, so that a download that
// waits for the network says so with the bytes done so far, and every
// report says it until the wait is over.
type waitReports struct {
	mu      sync.Mutex
	fn      func(ota.Progress)
	last    ota.Progress
	waiting *ota.Waiting
}

// watchWaits routes the job's progress reports through a waitReports.
func (j *Job) watchWaits() {
	if j.Progress == nil || j.waits != nil {
		return
	}
	w := &waitReports{fn: j.Progress, last: ota.Progress{Phase: ota.Downloading, BytesTotal: j.Size}}
	j.Progress, j.waits = w.report, w
}

func (w *waitReports) report(p ota.Progress) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last = p
	p.Waiting = w.waiting
	w.fn(p)
}

// wait is fetch.Request.Waiting: x is the wait begun, nil once it is over.
func (w *waitReports) wait(x *ota.Waiting) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if x == nil && w.waiting == nil {
		return
	}
	w.waiting = x
	p := w.last
	p.Waiting = x
	w.fn(p)
}

// defaultMountinfo is where mounted devices are listed.
const defaultMountinfo = "/proc/self/mountinfo"

// tuning holds the pipeline's knobs. Write uses defaultTuning; tests and
// benchmarks try others.
type tuning struct {
	chunk         int           // bytes per pipeline buffer, per decode and per write
	buffers       int           // pipeline buffers between the decoder and the writer
	rbBuffers     int           // pipeline buffers with read-back on (0: buffers)
	syncLag       int64         // the writer waits for writeback this far behind its head
	readChunk     int           // bytes per readback read
	readBufs      int           // readback reads in flight
	stall         time.Duration // a body delivering nothing this long is resumed
	progressEvery time.Duration
	mountinfo     string

	noDirect       bool                             // force the readback's buffered fallback
	bufferedWrite  bool                             // write a File through the page cache, not O_DIRECT
	beforeReadback func(off, n int64, direct bool)  // called before each readback read
	beforeWrite    func(p *pipeline, batch []chunk) // called before each stream write
}

func defaultTuning() tuning {
	return tuning{
		chunk:         512 << 10,
		buffers:       4,
		rbBuffers:     3,
		syncLag:       16 << 20,
		readChunk:     256 << 10,
		readBufs:      2,
		stall:         60 * time.Second,
		progressEvery: 250 * time.Millisecond,
		mountinfo:     defaultMountinfo,
	}
}

// check validates the job's fields and returns the decoded sha256.
func (j *Job) check() ([]byte, error) {
	if j.Target == nil || j.Target.Name() == "" {
		return nil, ota.Wrap(ota.CodeWriteFailed, errors.New("job: no target slot"))
	}
	if j.URL == "" {
		return nil, ota.Wrap(ota.CodeDownloadFailed, fmt.Errorf("job for %s: no payload url", j.Target.Name()))
	}
	if j.Compression != "" && !j.Compression.Valid() {
		return nil, ota.Wrap(ota.CodeDownloadFailed, fmt.Errorf("payload %s: unsupported compression %q", j.URL, j.Compression))
	}
	if j.Size <= 0 {
		return nil, ota.Wrap(ota.CodeSizeMismatch, fmt.Errorf("payload %s: size %d is not positive", j.URL, j.Size))
	}
	if j.DownloadSize < 0 {
		return nil, ota.Wrap(ota.CodeDownloadFailed, fmt.Errorf("payload %s: download_size %d is negative", j.URL, j.DownloadSize))
	}
	sum, ok := ota.ParseSHA256(j.SHA256)
	if !ok {
		return nil, ota.Wrap(ota.CodeHashMismatch, fmt.Errorf("payload %s: sha256 %q is not 64 hex digits", j.URL, j.SHA256))
	}
	return sum[:], nil
}

// request is the download of url for this job, at most limit bytes.
func (j *Job) request(url string, limit int64, tun *tuning, fetched *atomic.Int64) fetch.Request {
	r := fetch.Request{URL: url, Limit: limit, Retry: j.Retry, Until: j.Until, Schemes: j.Schemes, Client: j.HTTPClient, Stall: tun.stall, Fetched: fetched}
	if j.waits != nil {
		r.Waiting = j.waits.wait
	}
	return r
}

// downloadLimit bounds the bytes fetched: download_size when the manifest
// gives it, else twice the image plus 1 MiB, which no real compressor's
// output reaches, so endless data (empty gzip members, zstd skippable frames,
// xz padding) ends with download_failed instead of streaming forever.
func (j *Job) downloadLimit() int64 {
	if j.DownloadSize > 0 {
		return j.DownloadSize
	}
	return 2*j.Size + 1<<20
}

// bootedPath is the booted slot's device, when it is a File.
func (j *Job) bootedPath() string {
	if f, ok := j.Booted.(File); ok {
		return string(f)
	}
	return ""
}

// targetName is the target slot's name, for messages.
func (j *Job) targetName() string {
	if j.Target == nil {
		return ""
	}
	return j.Target.Name()
}
