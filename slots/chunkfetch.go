package slots

import (
	"context"
	"errors"
	"fmt"
	"io"
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
// the bytes fetched, never a wrong byte.
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
	want := payload.DeltaExpectOf(d)
	at := fmt.Sprintf("payload.chunks.deltas[%d]", k)
	if err := want.Validate(at); err != nil || d.IndexSize > payload.MaxIndexSize {
		return nil
	}
	src, err := fetch.OpenRangesNamed(job.request(d.URL, 0, in.tun, &in.fetched), d.Size, at+".size")
	if err != nil {
		return nil
	}
	defer src.Close()
	body, err := src.Open(ctx, 0, d.IndexSize)
	if errors.Is(err, fetch.ErrNoRanges) {
		// The index is the file's start: a plain stream of it will do.
		body, err = fetch.Open(ctx, job.request(d.URL, d.Size, in.tun, &in.fetched))
	}
	if err != nil {
		return ctx.Err()
	}
	defer body.Close()
	buf := make([]byte, d.IndexSize)
	if _, err := io.ReadFull(body, buf); err != nil {
		return ctx.Err()
	}
	if in.delta, err = payload.ParseDelta(buf, want, in.x, at); err != nil {
		in.delta = nil
		return nil
	}
	in.deltaAt, in.deltaOf = k, d
	return nil
}
