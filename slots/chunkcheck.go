package slots

import (
	"context"
	"crypto/sha256"
	"fmt"
	"time"

	"github.com/otad/otad/ota"
)

// reporter rate-limits progress reports; counts include what runs before a
// restart did, as the checkpoint recorded it.
type reporter struct {
	fn       func(ota.Progress)
	every    time.Duration
	total    int64
	last     time.Time
	fetched0 int64 // bytes fetched before this run
}

func newReporter(fn func(ota.Progress), every time.Duration, total int64, cp *checkpoint) *reporter {
	r := &reporter{fn: fn, every: every, total: total}
	if cp != nil {
		r.fetched0 = cp.Fetched
	}
	return r
}

func (r *reporter) report(phase ota.Phase, done, fetched, reused int64, force bool) {
	if r.fn == nil {
		return
	}
	now := time.Now()
	if !force && now.Sub(r.last) < r.every {
		return
	}
	r.last = now
	r.fn(ota.Progress{Phase: phase, BytesDone: done, BytesTotal: r.total, Transfer: ota.Transfer{BytesFetched: fetched, BytesReused: reused}})
}

// readBack reads the whole image back from the slot's storage (O_DIRECT
// where it works) and checks every chunk against the index and the whole
// against sha256: readback_mismatch otherwise. Two reads are in flight, each
// into half of block, while the other is hashed.
func (in *chunkInstall) readBack(ctx context.Context, block []byte, fetched, reused int64) error {
	cs := in.x.ChunkSize()
	half := max(cs, int64(len(block))/2/cs*cs)
	q := &readQueue{read: func(r *readReq) { readRegion(in.rd, in.direct, r) }, target: in.job.targetName(), free: [][]byte{block[:half], block[half : 2*half]}}
	defer q.wait()
	size := in.job.Size
	h := sha256.New()
	for hashed := int64(0); hashed < size; {
		q.issue(size, nil)
		r, err := q.next(ctx)
		if err != nil {
			return err
		}
		for off := int64(0); off < r.n; off += cs {
			c := in.x.Chunk(int((r.off + off) / cs))
			if sha256.Sum256(r.buf[off:off+int64(c.Length)]) != c.SHA256 {
				return ota.FieldErrorf(ota.CodeReadbackMismatch, fmt.Sprintf("slot.chunk[%d]", c.Num), "slot %s at offset %d does not hold the chunk the index lists", in.job.targetName(), c.Offset)
			}
		}
		h.Write(r.buf[:r.n])
		hashed += r.n
		q.release(r)
		in.progress.report(ota.Verifying, hashed, fetched, reused, hashed == size)
	}
	if sum := h.Sum(nil); [sha256.Size]byte(sum) != [sha256.Size]byte(in.expected) {
		return ota.Wrap(ota.CodeReadbackMismatch, fmt.Errorf("slot %s read back has sha256 %x, manifest says %x", in.job.targetName(), sum, in.expected))
	}
	return nil
}
