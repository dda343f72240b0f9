package slots

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"

	"github.com/otad/otad/fetch"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/payload"
)

// fetchIndex downloads the index, at most index_size bytes of it, and checks
// it against the manifest (payload.ParseIndex): index_mismatch otherwise.
func fetchIndex(ctx context.Context, job *ChunkedJob, tun *tuning, fetched *atomic.Int64) (*payload.Index, error) {
	n := job.Expect.IndexSize
	// The read stops one byte past index_size; the limit is a stream's for that size.
	src, err := fetch.Open(ctx, job.request(job.IndexURL, 2*n+1<<20, tun, fetched))
	if err != nil {
		return nil, err
	}
	defer src.Close()
	// One byte more tells a longer index from one of the right size.
	buf := make([]byte, n+1)
	got, err := io.ReadFull(src, buf)
	switch {
	case err == nil:
		return nil, ota.FieldErrorf(ota.CodeIndexMismatch, "index", "longer than payload.chunks.index_size %d", n)
	case ota.CodeOf(err) != "":
		// Before EOF: a final error may wrap the EOF of a connection cut.
		return nil, err
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
	default:
		return nil, ota.Wrap(ota.CodeDownloadFailed, fmt.Errorf("index %s: %w", job.IndexURL, err))
	}
	return payload.ParseIndex(buf[:got], job.Expect)
}

// fetchDelta fetches and checks the delta index of the booted image, when the
// manifest lists one (job.Chunks.Deltas, payload.chunks.deltas, whose from is
// the image the booted slot holds: bootedChunks settled it) and using it can
// cost less than the chunks alone. A delta from any other image is never used.
// One that cannot be fetched or is refused leaves the install to the chunks: it costs
// the bytes fetched, never a wrong byte, and says so in the log
// (docs/contract/chunked.md): otherwise a device fetches several times what
// sign printed and nothing tells why.
func (in *chunkInstall) fetchDelta(ctx context.Context) error {
	job := in.job
	k := job.Chunks.DeltaFrom(in.bootedImage)
	if k < 0 || job.bootedPath() == "" {
		return nil
	}
	d := (*job.Chunks.Deltas)[k]
	if d.Fetch >= job.Expect.IndexSize+job.Expect.StoreSize {
		return nil
	}
	at := fmt.Sprintf("payload.chunks.deltas[%d]", k)
	x, err := in.deltaIndex(ctx, d, at)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		warnDeltaFailed(in.log, d.URL, err)
		return nil
	}
	in.delta, in.deltaAt, in.deltaOf = x, k, d
	return nil
}

// deltaIndex fetches delta file d's index and checks it against the manifest.
func (in *chunkInstall) deltaIndex(ctx context.Context, d ota.Delta, at string) (*payload.Delta, error) {
	want := payload.DeltaExpectOf(d)
	if err := want.Validate(at); err != nil {
		return nil, err
	}
	if d.IndexSize > payload.MaxIndexSize {
		return nil, ota.FieldErrorf(ota.CodeIndexMismatch, at+".index_size", "%d, over the limit of %d", d.IndexSize, payload.MaxIndexSize)
	}
	src, err := fetch.OpenRangesNamed(in.job.request(d.URL, 0, in.tun, &in.fetched), d.Size, at+".size")
	if err != nil {
		return nil, err
	}
	defer src.Close()
	body, err := src.Open(ctx, 0, d.IndexSize)
	if errors.Is(err, fetch.ErrNoRanges) {
		// The index is the file's start: a plain stream of it will do.
		body, err = fetch.Open(ctx, in.job.request(d.URL, d.Size, in.tun, &in.fetched))
	}
	if err != nil {
		return nil, err
	}
	defer body.Close()
	buf := make([]byte, d.IndexSize)
	if _, err := io.ReadFull(body, buf); err != nil {
		return nil, fmt.Errorf("index of %s: %w", d.URL, err)
	}
	return payload.ParseDelta(buf, want, in.x, at)
}

// warnDeltaFailed says that the delta file at url is given up after err, in
// the same words before the install (its index) as during it (its ranges).
func warnDeltaFailed(log *slog.Logger, url string, err error) {
	log.Warn("delta file failed: the chunks it was to bring are fetched whole from the store", "url", url, "err", err)
}
