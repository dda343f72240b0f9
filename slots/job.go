package slots

import (
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/otad/otad/backoff"
	"github.com/otad/otad/fetch"
	"github.com/otad/otad/ota"
)

// Progress phases.
const (
	PhaseDownloading = "downloading"
	PhaseVerifying   = "verifying"
)

// Progress reports how far a Write has got. While downloading, BytesDone
// counts decompressed bytes written to the slot and Downloaded the bytes
// fetched; while verifying, BytesDone counts bytes read back. Reused counts
// image bytes a chunked install took from the slots on the device.
type Progress struct {
	Phase      string
	BytesDone  int64
	BytesTotal int64
	Downloaded int64
	Reused     int64
}

// Job describes one payload (docs/contract/formats.md) and where it goes.
type Job struct {
	URL          string
	Compression  ota.Compression
	Size         int64
	SHA256       string
	DownloadSize int64

	// Target is the inactive slot: a block device, or a regular file in
	// tests; with Slot, only its name in messages.
	Target string
	// Slot, when set, is the inactive slot in memory (a simulated device),
	// written instead of the file at Target.
	Slot *MemSlot
	// Booted is the booted slot; Write refuses to write it.
	Booted string
	// Readback reads the slot back from storage (not the page cache) and
	// hashes it again.
	Readback bool
	Retry    backoff.Policy
	// Schemes are the URL schemes every redirect may use ([download]
	// schemes); empty allows the payload URL's own scheme and https.
	Schemes []string
	// HTTPClient nil uses a client with connect, TLS and header timeouts and
	// no overall timeout.
	HTTPClient *http.Client
	// Progress, when set, is called from Write's goroutine at most every
	// 250 ms and at the end of each phase; it must not block.
	Progress func(Progress)
}

// tuning holds the pipeline's knobs. Write uses defaultTuning; tests and
// benchmarks try others.
type tuning struct {
	chunk         int           // bytes per pipeline buffer, per decode and per write
	buffers       int           // pipeline buffers between the decoder and the writer
	syncLag       int64         // the writer waits for writeback this far behind its head
	readChunk     int           // bytes per readback read
	readBufs      int           // readback reads in flight
	stall         time.Duration // a body delivering nothing this long is resumed
	progressEvery time.Duration
	mountinfo     string

	noDirect       bool                            // force the readback's buffered fallback
	beforeReadback func(off, n int64, direct bool) // called before each readback read
}

func defaultTuning() tuning {
	return tuning{
		chunk:         1 << 20,
		buffers:       3,
		syncLag:       16 << 20,
		readChunk:     1 << 20,
		readBufs:      2,
		stall:         60 * time.Second,
		progressEvery: 250 * time.Millisecond,
		mountinfo:     "/proc/self/mountinfo",
	}
}

// check validates the job's fields and returns the decoded sha256.
func (j *Job) check() ([]byte, error) {
	if j.Target == "" && j.Slot == nil {
		return nil, ota.Wrap(ota.CodeWriteFailed, errors.New("job: no target slot"))
	}
	if j.URL == "" {
		return nil, ota.Wrap(ota.CodeDownloadFailed, fmt.Errorf("job for %s: no payload url", j.Target))
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
	return fetch.Request{URL: url, Limit: limit, Retry: j.Retry, Schemes: j.Schemes, Client: j.HTTPClient, Stall: tun.stall, Fetched: fetched}
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
