package slots

import (
	"context"
	"crypto/sha256"
	"fmt"
	"hash"
	"sync/atomic"
	"time"

	"github.com/otad/otad/ota"
	"github.com/otad/otad/payload"
)

// reporter rate-limits progress reports; counts include what runs before a
// restart did, as the checkpoint recorded it.
type reporter struct {
	fn       func(ota.Progress)
	every    time.Duration
	total    int64
	path     ota.TransferPath // planned
	last     time.Time
	fetched0 int64       // bytes fetched before this run
	dropped  atomic.Bool // the deltas were given up for the store
}

// dropDeltas says the deltas still to come are fetched whole.
func (r *reporter) dropDeltas() { r.dropped.Store(true) }

// pathOf is the path as it is: delta once chunks were rebuilt from deltas, or
// while they are still to come; chunked when none were and none will be.
func (r *reporter) pathOf(cp checkpoint) ota.TransferPath {
	if cp.Delta > 0 || (r.path == ota.PathDelta && !r.dropped.Load() && cp.Done < r.total) {
		return ota.PathDelta
	}
	if r.path == ota.PathDelta {
		return ota.PathChunked
	}
	return r.path
}

func newReporter(fn func(ota.Progress), every time.Duration, total int64, cp *checkpoint, path ota.TransferPath) *reporter {
	r := &reporter{fn: fn, every: every, total: total, path: path}
	if cp != nil {
		r.fetched0 = cp.Fetched
	}
	return r
}

// report says done bytes of the phase are through, and where the bytes came from
// (the counts of cp).
func (r *reporter) report(phase ota.Phase, done int64, cp checkpoint, force bool) {
	if r.fn == nil {
		return
	}
	now := time.Now()
	if !force && now.Sub(r.last) < r.every {
		return
	}
	r.last = now
	r.fn(ota.Progress{Phase: phase, BytesDone: done, BytesTotal: r.total,
		Transfer: ota.Transfer{Path: r.pathOf(cp), BytesFetched: cp.Fetched, BytesReused: cp.Reused, BytesDelta: cp.Delta}})
}

// readBack reads the whole image back from the slot's storage (O_DIRECT
// where it works) and checks the whole against sha256: readback_mismatch
// otherwise, naming the first chunk that differs from the index
// (mismatchAt). One hash per byte: every chunk was checked against the
// index before it was written, so a second hash of each chunk on every
// install would only name the chunk sooner (issue 33). Two reads are in
// flight, each into half of block, while the other is hashed.
func (in *chunkInstall) readBack(ctx context.Context, block []byte, counts checkpoint) error {
	h := sha256.New()
	err := in.readSlot(ctx, block, func(b []byte, hashed int64) bool {
		h.Write(b)
		in.progress.report(ota.Verifying, hashed, counts, hashed == in.job.Size)
		return true
	})
	if err != nil {
		return err
	}
	if sum := h.Sum(nil); [sha256.Size]byte(sum) != [sha256.Size]byte(in.expected) {
		err := ota.Wrap(ota.CodeReadbackMismatch, fmt.Errorf("slot %s read back has sha256 %x, manifest says %x", in.job.targetName(), sum, in.expected))
		if c, found, lerr := in.mismatchAt(ctx, block); lerr == nil && found {
			err = ota.FieldErrorf(ota.CodeReadbackMismatch, fmt.Sprintf("slot.chunk[%d]", c.Num), "slot %s at offset %d does not hold the chunk the index lists (read back has sha256 %x, manifest says %x)", in.job.targetName(), c.Offset, sum, in.expected)
		}
		return err
	}
	return nil
}

// mismatchAt reads the slot again, chunk by chunk against the index, for
// the first chunk that differs; found is false when all match.
func (in *chunkInstall) mismatchAt(ctx context.Context, block []byte) (payload.Chunk, bool, error) {
	ck := chunkChecker{x: in.x, h: sha256.New()}
	var bad payload.Chunk
	found := false
	err := in.readSlot(ctx, block, func(b []byte, _ int64) bool {
		c, ok := ck.feed(b)
		if !ok {
			bad, found = c, true
		}
		return ok
	})
	return bad, found, err
}

// readSlot reads the image's bytes from the slot in order, two reads in
// flight, and hands each to fn with the bytes read so far, until fn says
// stop.
func (in *chunkInstall) readSlot(ctx context.Context, block []byte, fn func(b []byte, hashed int64) bool) error {
	half := max(alignment, int64(len(block))/2/alignment*alignment)
	q := &readQueue{read: func(r *readReq) { in.tgt.readRegion(r) }, target: in.job.targetName(), free: [][]byte{block[:half], block[half : 2*half]}}
	defer q.wait()
	size := in.job.Size
	for hashed := int64(0); hashed < size; {
		q.issue(size, nil)
		r, err := q.next(ctx)
		if err != nil {
			return err
		}
		hashed += r.n
		more := fn(r.buf[:r.n], hashed)
		q.release(r)
		if !more {
			return nil
		}
	}
	return nil
}

// chunkChecker checks the image's bytes, fed in order in pieces of any size, chunk by
// chunk against the index: a chunk's SHA-256, or zeros for a zero chunk.
type chunkChecker struct {
	x    *payload.Index
	i    int   // the chunk being fed
	at   int64 // bytes of it fed
	h    hash.Hash
	zero bool // every byte of a zero chunk so far was zero
}

// feed checks b; on a chunk that does not match it returns the chunk and false.
func (k *chunkChecker) feed(b []byte) (payload.Chunk, bool) {
	for len(b) > 0 && k.i < k.x.Count() {
		c := k.x.Chunk(k.i)
		if k.at == 0 {
			k.h.Reset()
			k.zero = true
		}
		n := int(min(int64(len(b)), int64(c.Length)-k.at))
		if c.Kind == payload.KindZero {
			k.zero = k.zero && payload.AllZero(b[:n])
		} else {
			k.h.Write(b[:n])
		}
		b, k.at = b[n:], k.at+int64(n)
		if k.at < int64(c.Length) {
			continue
		}
		ok := k.zero
		if c.Kind != payload.KindZero {
			ok = [sha256.Size]byte(k.h.Sum(nil)) == c.SHA256
		}
		if !ok {
			return c, false
		}
		k.i, k.at = k.i+1, 0
	}
	return payload.Chunk{}, true
}
