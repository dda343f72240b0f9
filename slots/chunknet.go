package slots

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/otad/otad/fetch"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/payload"
)

// network brings the plan's network chunks, decoded and checked, in chunk
// order. Fetch k of the plan goes to lane k mod lanes, so that a few range
// requests are in flight while the consumer takes the chunks in order: it
// only ever waits for the lane of the earliest fetch, whose buffers are its
// own, so no lane can hold the buffers another one needs.
type network struct {
	in      *chunkInstall
	src     fetch.Ranges
	dsrc    fetch.Ranges  // the delta file, when the plan fetches deltas
	req     fetch.Request // the store's: its retry policy, expiry and wait reports
	fetches []payload.Fetch
	lanes   []*lane
	cur     int // the fetch the consumer is in
	stop    context.CancelFunc
	wg      sync.WaitGroup
	// seq is the whole store read from its start, once ranges failed.
	seq    io.ReadCloser
	seqPos int64
	// The consumer's decoder, for the sequential stream and refetches.
	mine *lane
	// unchecked: the lanes hand raw chunks on unchecked, for the assembler
	// to check as it hashes the image (imageHash.checked).
	unchecked bool
	// noDeltas is set once the delta file failed: the lanes fetch the chunks
	// still to come as deltas whole from the store.
	noDeltas atomic.Bool
	warnOnce sync.Once
	// noRangesOnce: the store read whole is said once (warnNoRanges).
	noRangesOnce sync.Once
	// dec is every lane's: they decode into their own buffers.
	dec *payload.Decoder
}

// lane is one fetcher's decoder, buffers and queue of decoded chunks.
type lane struct {
	out    chan piece
	ring   *ring  // the chunks' room; nil for a lane that reads into its caller's buffers
	stored []byte // a compressed chunk as it arrives
	dec    *payload.Decoder
	// packed: zstd chunks are handed on as stored, for the assembler to
	// decode with the bytes before them (chunkprefix.go).
	packed bool
}

func newLane(dec *payload.Decoder, mem, stored []byte) *lane {
	l := &lane{stored: stored, dec: dec}
	if mem != nil {
		l.ring = newRing(mem)
		l.out = make(chan piece, l.ring.slots())
	}
	return l
}

// take is room in l's ring for chunk c as it arrives and is decoded (a
// delta of it: its length).
func (l *lane) take(ctx context.Context, c payload.Chunk, delta int64) ([]byte, error) {
	n := max(c.StoreLength, c.Length)
	switch {
	case delta > 0:
		n = int(delta)
	case c.Kind != payload.KindRaw:
		n = max(c.StoreLength, c.Length+payload.DecodeSlack)
	}
	return l.ring.take(ctx, n)
}

// start runs the lanes until they have fetched everything or ctx ends.
func (n *network) start(ctx context.Context) {
	ctx, n.stop = context.WithCancel(ctx)
	for i, l := range n.lanes {
		n.wg.Go(func() { n.runLane(ctx, l, i) })
	}
}

// close stops the lanes and waits for them.
func (n *network) close() {
	if n.stop != nil {
		n.stop()
	}
	n.wg.Wait()
	if n.seq != nil {
		n.seq.Close()
	}
	if n.dec != nil {
		n.dec.Close()
	}
	n.src.Close()
	if n.dsrc != nil {
		n.dsrc.Close()
	}
}

func (n *network) runLane(ctx context.Context, l *lane, first int) {
	for k := first; k < len(n.fetches); k += len(n.lanes) {
		f, file := n.fetches[k], n.in.plan.Files[k]
		at, err := f.First, error(nil)
		tried := file == payload.FileStore || !n.noDeltas.Load()
		if tried {
			at, err = n.fetch(ctx, l, f, file, sourceOf(file))
		}
		if file == payload.FileDelta && ctx.Err() == nil && (!tried || err != nil) {
			// A delta is an aid, the store is the truth: what the delta file
			// did not bring comes whole from there.
			if err != nil {
				n.dropDeltas(err)
			}
			err = n.fetchWhole(ctx, l, f, at)
		}
		if err != nil {
			if ctx.Err() == nil {
				select {
				case l.out <- piece{chunk: at, err: err}:
				case <-ctx.Done():
				}
			}
			return
		}
	}
}

// fetch brings the chunks of f, a fetch of file, that the plan takes from
// src into l.out, retrying transient failures from the first chunk not yet
// delivered. On failure it returns the chunk it failed at.
func (n *network) fetch(ctx context.Context, l *lane, f payload.Fetch, file payload.File, src payload.Source) (int, error) {
	i, retry := f.First, fetch.NewRetrier(n.req)
	rs := n.src
	if file == payload.FileDelta {
		// An aid: when it fails, the store brings the chunks (and waits for
		// the network if it is that).
		rs = n.dsrc
		retry.Counted()
	}
	for {
		for i < f.End && !n.planned(src, i) {
			i++
		}
		if i == f.End {
			return i, nil
		}
		start, _, _ := n.loc(file, i)
		body, err := rs.Open(ctx, start, f.Offset+f.Length-start)
		if err == nil {
			retry.Answered()
			before := i
			i, err = n.stream(ctx, l, body, i, f.End, file, src)
			body.Close()
			if err == nil {
				return i, nil
			}
			if i > before {
				retry.Progress() // it delivered: the count starts again
			}
		}
		if err = n.retryWait(ctx, retry, err); err != nil {
			return i, err
		}
	}
}

// retryWait waits before the next try when err is transient (a network
// down waits as long as the offer is valid: fetch.Retrier); otherwise it
// returns the final error.
func (n *network) retryWait(ctx context.Context, retry *fetch.Retrier, err error) error {
	if ctx.Err() != nil {
		return err
	}
	return retry.Retry(ctx, err)
}

// stream reads chunks i.. of a fetch of file from body and queues the ones
// the plan takes from src (a delta as it is: the assembler decodes it); it
// returns the first chunk not delivered.
func (n *network) stream(ctx context.Context, l *lane, body io.Reader, i, end int, file payload.File, src payload.Source) (int, error) {
	for ; i < end; i++ {
		c := n.in.x.Chunk(i)
		_, length, has := n.loc(file, i)
		if !n.planned(src, i) {
			// Inside a merged range, not needed: skipped.
			if has {
				if _, err := io.CopyN(io.Discard, body, length); err != nil {
					return i, err
				}
			}
			continue
		}
		var delta int64
		if file == payload.FileDelta {
			delta = length
		}
		buf, err := l.take(ctx, c, delta)
		if err != nil {
			return i, err
		}
		var p piece
		if file == payload.FileDelta || (n.unchecked && c.Kind == payload.KindRaw) {
			// As stored: a delta, which the assembler decodes, or a raw
			// chunk it checks as it hashes the image (imageHash.checked).
			if _, err := io.ReadFull(body, buf[:length]); err != nil {
				l.ring.free <- buf
				return i, err
			}
			p = piece{chunk: i, buf: buf[:length], pool: l.ring.free}
			if file == payload.FileDelta {
				p.back, p.frame = buf, true
			} else {
				p.write, p.unchecked = true, true
			}
		} else {
			b, err := l.read(body, c, buf)
			if ota.CodeOf(err) == ota.CodeChunkMismatch {
				// The bytes arrived whole and are wrong: fetched once more.
				b, err = n.fetchOne(ctx, l, c, buf)
			}
			if err != nil {
				l.ring.free <- buf
				return i, err
			}
			p = piece{chunk: i, buf: b, write: true, pool: l.ring.free}
		}
		select {
		case l.out <- p:
		case <-ctx.Done():
			return i, ctx.Err()
		}
	}
	return i, nil
}

// planned reports whether the plan takes chunk i from src.
func (n *network) planned(src payload.Source, i int) bool {
	return n.in.plan.Steps[i-n.in.plan.Steps[0].Chunk].Source == src
}

// loc is where chunk i's bytes lie in file, if it has any there.
func (n *network) loc(file payload.File, i int) (off, length int64, ok bool) {
	if file == payload.FileDelta {
		d, ok := n.in.delta.Find(i)
		return d.Offset, int64(d.Length), ok
	}
	c := n.in.x.Chunk(i)
	return c.StoreOffset, int64(c.StoreLength), c.StoreLength > 0
}

// read reads chunk c's stored bytes from r and decodes them into buf,
// checked against the index before anyone sees them.
func (l *lane) read(r io.Reader, c payload.Chunk, buf []byte) ([]byte, error) {
	if l.packed && c.Kind == payload.KindZstd {
		if _, err := io.ReadFull(r, buf[:c.StoreLength]); err != nil {
			return nil, err
		}
		return buf[:c.StoreLength], nil
	}
	dst := l.stored[:c.StoreLength]
	if c.Kind == payload.KindRaw {
		dst = buf[:c.StoreLength] // already the chunk's bytes: no copy
	}
	if _, err := io.ReadFull(r, dst); err != nil {
		return nil, err
	}
	out, err := l.dec.DecodeInto(c.Num, dst, buf)
	if err != nil {
		return nil, err
	}
	if len(out) > 0 && &out[0] == &buf[0] {
		return buf[:len(out)], nil // whole: buf goes back to the pool
	}
	return buf[:copy(buf[:c.Length], out)], nil
}

// fetchOne fetches chunk c alone into buf, retrying transient failures: the
// refetch of a chunk that arrived wrong, and a chunk a slot did not hold
// after all. A second wrong arrival is final: chunk_mismatch.
func (n *network) fetchOne(ctx context.Context, l *lane, c payload.Chunk, buf []byte) ([]byte, error) {
	return n.fetchAlone(ctx, l, c, buf, true)
}

// fetchAlone is fetchOne; without fromStart, a server that serves no ranges
// is fetch.ErrNoRanges instead of a read of the store from its start.
func (n *network) fetchAlone(ctx context.Context, l *lane, c payload.Chunk, buf []byte, fromStart bool) ([]byte, error) {
	retry := fetch.NewRetrier(n.req)
	for {
		body, err := n.src.Open(ctx, c.StoreOffset, int64(c.StoreLength))
		if errors.Is(err, fetch.ErrNoRanges) && !fromStart {
			return nil, err
		}
		if errors.Is(err, fetch.ErrNoRanges) {
			n.warnNoRanges(err)
			body, err = openSequential(ctx, n.in.job, n.in.tun, &n.in.fetched, c.StoreOffset)
		}
		if err == nil {
			var b []byte
			b, err = l.read(body, c, buf)
			body.Close()
			if err == nil {
				return b, nil
			}
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				err = &fetch.TransientError{Err: fmt.Errorf("store %s: chunk %d cut short: %w", n.in.job.URL, c.Num, err)}
			}
		}
		if err = n.retryWait(ctx, retry, err); err != nil {
			return nil, err
		}
	}
}

// next returns chunk c, the next network chunk in order.
func (n *network) next(ctx context.Context, c payload.Chunk) (piece, error) {
	if n.seq == nil {
		for n.cur < len(n.fetches) && c.Num >= n.fetches[n.cur].End {
			n.cur++
		}
		if n.cur == len(n.fetches) {
			return piece{}, ota.Wrap(ota.CodeWriteFailed, fmt.Errorf("chunk %d is in no fetch of the plan", c.Num))
		}
		var p piece
		select {
		case p = <-n.lanes[n.cur%len(n.lanes)].out:
		case <-ctx.Done():
			return piece{}, ctx.Err()
		}
		if p.err == nil && p.chunk != c.Num {
			return piece{}, ota.Wrap(ota.CodeWriteFailed, fmt.Errorf("lane delivered chunk %d, chunk %d is next", p.chunk, c.Num))
		}
		if !errors.Is(p.err, fetch.ErrNoRanges) {
			return p, p.err
		}
		if err := n.sequential(ctx, c, p.err); err != nil {
			return piece{}, err
		}
	}
	return n.nextSequential(ctx, c)
}
