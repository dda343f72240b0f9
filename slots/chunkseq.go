package slots

import (
	"context"
	"errors"
	"io"
	"sync/atomic"

	"github.com/otad/otad/fetch"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/payload"
)

// fetchMissing fetches chunk c for the assembler when a slot did not hold
// it after all (a booted slot changed since its kept index was written, a
// delta that did not rebuild it): by range, or, once the server proved it
// serves none, from the one read of the store in order that every later
// chunk comes from too, never from the store's start once per chunk.
func (n *network) fetchMissing(ctx context.Context, c payload.Chunk, buf []byte) ([]byte, error) {
	if n.seq == nil {
		b, err := n.fetchAlone(ctx, n.mine, c, buf, false)
		if ota.CodeOf(err) == ota.CodeChunkMismatch {
			// The bytes arrived whole and are wrong: fetched once more.
			b, err = n.fetchAlone(ctx, n.mine, c, buf, false)
		}
		if !errors.Is(err, fetch.ErrNoRanges) {
			return b, err
		}
		if err := n.sequential(ctx, c, err); err != nil {
			return nil, err
		}
	}
	if c.StoreOffset < n.seqPos {
		// Behind the stream (stored once for two chunks): alone.
		return n.fetchOne(ctx, n.mine, c, buf)
	}
	return n.readSequential(ctx, n.mine, c, buf)
}

// sequential gives up on ranges from chunk c on, after why: the lanes stop,
// and the store is read from its start, skipping to c.
func (n *network) sequential(ctx context.Context, c payload.Chunk, why error) error {
	n.warnNoRanges(why)
	n.stop()
	n.wg.Wait()
	n.stop = nil
	// Chunks the lanes fetched ahead are dropped; their buffers go back.
	for _, l := range n.lanes {
		for len(l.out) > 0 {
			if p := <-l.out; p.buf != nil {
				p.pool <- p.buf
			}
		}
	}
	seq, err := openSequential(ctx, n.in.job, n.in.tun, &n.in.fetched, c.StoreOffset)
	if err != nil {
		return err
	}
	n.seq, n.seqPos = seq, c.StoreOffset
	return nil
}

func (n *network) nextSequential(ctx context.Context, c payload.Chunk) (piece, error) {
	l := n.lanes[0]
	buf, err := l.take(ctx, c, 0)
	if err != nil {
		return piece{}, err
	}
	b, err := n.readSequential(ctx, l, c, buf)
	if err != nil {
		l.ring.free <- buf
		return piece{}, err
	}
	return piece{chunk: c.Num, buf: b, write: true, pool: l.ring.free}, nil
}

// readSequential reads chunk c from the sequential stream into buf, decoded
// by l and checked.
func (n *network) readSequential(ctx context.Context, l *lane, c payload.Chunk, buf []byte) ([]byte, error) {
	if err := skipStore(n.seq, c.StoreOffset-n.seqPos, n.in.job); err != nil {
		return nil, err
	}
	n.seqPos = c.StoreOffset + int64(c.StoreLength)
	b, err := l.read(n.seq, c, buf)
	switch {
	case ota.CodeOf(err) == ota.CodeChunkMismatch:
		b, err = n.fetchOne(ctx, n.mine, c, buf)
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		err = ota.FieldErrorf(ota.CodeSizeMismatch, "payload.chunks.store_size", "%d, but store %s ends inside chunk %d", n.in.job.Expect.StoreSize, n.in.job.URL, c.Num)
	}
	return b, err
}

// openSequential opens the whole store from its start, positioned at off:
// what a server that does not serve ranges allows. The stream resumes by
// itself after transient failures (fetch.Open); its errors are final.
func openSequential(ctx context.Context, job *ChunkedJob, tun *tuning, fetched *atomic.Int64, off int64) (io.ReadCloser, error) {
	src, err := fetch.Open(ctx, job.request(job.URL, job.Expect.StoreSize, tun, fetched))
	if err != nil {
		return nil, err
	}
	if err := skipStore(src, off, job); err != nil {
		src.Close()
		return nil, err
	}
	return src, nil
}

// skipStore discards n bytes of a sequential store stream.
func skipStore(r io.Reader, n int64, job *ChunkedJob) error {
	if n <= 0 {
		return nil
	}
	got, err := io.CopyN(io.Discard, r, n)
	if errors.Is(err, io.EOF) {
		return ota.FieldErrorf(ota.CodeSizeMismatch, "payload.chunks.store_size", "%d, but store %s ends after %d bytes", job.Expect.StoreSize, job.URL, got)
	}
	return err
}

// warnNoRanges says, once, that the store's server did not answer a Range
// request as asked, so the store is read from its start: the device then
// fetches up to the whole store, not what sign printed, and only the log
// says why (docs/contract/chunked.md).
func (n *network) warnNoRanges(why error) {
	n.noRangesOnce.Do(func() {
		n.in.log.Warn("the store's server answered without Range: the store is read whole from its start, not only the chunks this device lacks",
			"url", n.in.job.URL, "store_size", n.in.job.Expect.StoreSize, "err", why)
	})
}
