package payload

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"slices"

	"github.com/klauspost/compress/zstd"
	"github.com/otad/otad/ota"
)

// DeltaResult describes a delta file BuildDelta wrote and what a device whose booted
// slot holds the older image fetches with it.
type DeltaResult struct {
	Index       []byte // the delta index, first in the file
	IndexSHA256 [sha256.Size]byte
	From        [sha256.Size]byte // the older image's sha256
	FromSize    int64
	Count       int64 // chunks with a delta
	DeltasSize  int64 // bytes of deltas after the index
	// Image bytes the older image holds (chunks found by hash), that deltas
	// rebuild, and that are fetched whole; and the stored bytes of the chunks
	// fetched whole and of those the deltas rebuild (what a device holding the
	// older image would fetch of them without deltas).
	Held, Rebuilt, Full, FullStored, RebuiltStored int64
	// ByFile counts the chunks whose delta reads the old bytes of their own
	// files (WithFiles): those it made smaller than the shifts' guess; ByDiff,
	// the chunks whose delta is a binary diff (of their files or not).
	ByFile, ByDiff int64
	// Copies counts the records of held chunks that lie elsewhere in the
	// older image (copy records: one range, the chunk itself), CopySize
	// their frames' bytes, which no device fetches (placed.go).
	Copies, CopySize int64
}

func (r *DeltaResult) addFull(c Chunk) {
	r.Full += int64(c.Length)
	r.FullStored += int64(c.StoreLength)
}

// FetchChunks is what a device whose booted slot holds the older image fetches
// without the deltas: the index x and the chunks it does not hold, whole.
func (r *DeltaResult) FetchChunks(x *Index) int64 {
	return int64(len(x.Bytes())) + r.FullStored + r.RebuiltStored
}

// Size is the delta file's size.
func (r *DeltaResult) Size() int64 { return int64(len(r.Index)) + r.DeltasSize }

// Fetch is what a device whose booted slot holds the older image fetches in all: the
// index x (its file), this delta index, the deltas, and the chunks fetched whole.
func (r *DeltaResult) Fetch(x *Index) int64 {
	return int64(len(x.Bytes())) + int64(len(r.Index)) + r.DeltasSize - r.CopySize + r.FullStored
}

// Entry is the manifest's payload.chunks.deltas entry for the file served at url.
func (r *DeltaResult) Entry(url string, x *Index) ota.Delta {
	return ota.Delta{
		From: hex.EncodeToString(r.From[:]), FromSize: r.FromSize, URL: url, Size: r.Size(),
		IndexSize: int64(len(r.Index)), IndexSHA256: hex.EncodeToString(r.IndexSHA256[:]),
		Count: r.Count, Fetch: r.Fetch(x), Placed: true,
	}
}

// Expect is what the manifest entry of r says, for ParseDelta.
func (r *DeltaResult) Expect() DeltaExpect {
	return DeltaExpect{
		From: hex.EncodeToString(r.From[:]), FromSize: r.FromSize, IndexSize: int64(len(r.Index)),
		IndexSHA256: hex.EncodeToString(r.IndexSHA256[:]), Count: r.Count, Size: r.Size(),
	}
}

// BuildDelta writes to deltas a delta for every chunk of x, the index of newImg, that
// the older image old (oldSize bytes) does not hold, when one is smaller than the chunk
// as stored: a zstd frame whose raw dictionary is the older image's bytes where the
// chunk's pieces lie there (or, failing that, where its neighbours moved to, or the
// same offset). It reads old once, and newImg's chunks that old does not hold. Memory:
// the older image's chunk list and piece list (about 40 bytes a KiB... of the older
// image, on the signing machine), and a few chunks.
//
// WithFiles adds, for each chunk, a delta against the old bytes of the files it holds
// (deltafiles.go); the smaller of the two is kept, and the index is version 2.
func BuildDelta(ctx context.Context, old io.ReaderAt, oldSize int64, newImg io.ReaderAt, x *Index, deltas io.Writer, opts ...DeltaOption) (*DeltaResult, error) {
	var o deltaOpts
	for _, f := range opts {
		f(&o)
	}
	res := &DeltaResult{FromSize: oldSize}
	held, sim, err := scanOld(ctx, io.NewSectionReader(old, 0, oldSize), x, &res.From)
	if err != nil {
		return nil, err
	}
	maxDict := MaxDict(x)
	best, err := newDeltaEncoder(old, x, maxDict)
	if err != nil {
		return nil, err
	}
	defer best.close()
	raw := make([]byte, DeltaHeaderSize, DeltaHeaderSize+64*DeltaRecordSize)
	chunk := make([]byte, x.MaxChunk())
	ranges := 0 // in the records so far: at most MaxRanges a record on average (deltaranges.go)
	heldAt := func(i int) (int64, bool) { return held.Find(x.Chunk(i).SHA256) }
	for i := range x.Count() {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("build delta: %w", err)
		}
		c := x.Chunk(i)
		if c.Kind == KindZero {
			continue
		}
		if at, ok := heldAt(i); ok {
			res.Held += int64(c.Length)
			o.tell(i, c, HowHeld, 0)
			if raw, err = res.keepCopy(deltas, raw, i, c, at, best, o.new != nil); err != nil {
				return nil, err
			}
			continue
		}
		b := chunk[:c.Length]
		if _, err := newImg.ReadAt(b, c.Offset); err != nil {
			return nil, fmt.Errorf("build delta: read chunk %d of the new image at %d: %w", i, c.Offset, err)
		}
		shifts := append(sim.shifts(b, c.Offset), neighbourShifts(x, i, heldAt)...)
		rs := dictRanges(append(shifts, shift{}), c.Offset, int64(c.Length), oldSize, maxDict)
		slices.Reverse(rs) // the heaviest nearest the chunk: shorter offsets
		best.reset()
		if err := best.try(b, rs, HowShift); err != nil {
			return nil, err
		}
		if o.new != nil {
			maxN := min(MaxRanges2, MaxRanges*int(res.Count-res.Copies+1)-ranges)
			if err := best.tryFiles(o, b, i, c, rs, maxDict, maxN); err != nil {
				return nil, err
			}
		}
		// No dictionary (nothing of the older image near a chunk past its end),
		// or a delta that does not save more than its record costs: the chunk is
		// fetched whole.
		if best.frame == nil || len(best.frame)+DeltaRecordSize >= c.StoreLength {
			res.addFull(c)
			o.tell(i, c, HowWhole, int64(c.StoreLength))
			continue
		}
		o.tell(i, c, best.how, int64(len(best.frame)+deltaRecordHead2+deltaRangeSize2*len(best.ranges)))
		if raw, err = res.keep(deltas, raw, i, c, best, o.new != nil); err != nil {
			return nil, err
		}
		ranges += len(best.ranges)
	}
	putDeltaHeader(raw, res.From, sha256.Sum256(x.Bytes()), oldSize, res.Count, res.DeltasSize)
	if o.new != nil {
		raw[7] = deltaVersion2
	}
	if res.Index, err = compressIndex(raw); err != nil {
		return nil, fmt.Errorf("build delta: %w", err)
	}
	res.IndexSHA256 = sha256.Sum256(res.Index)
	return res, nil
}

// newDeltaEncoder is the encoder every chunk's tries share: one zstd
// writer, a dictionary of at most maxDict bytes.
func newDeltaEncoder(old io.ReaderAt, x *Index, maxDict int64) (*deltaEncoder, error) {
	enc, err := zstd.NewWriter(nil,
		zstd.WithEncoderLevel(zstd.SpeedBetterCompression), zstd.WithEncoderConcurrency(1),
		zstd.WithEncoderCRC(false), // every chunk is hashed
		zstd.WithWindowSize(deltaWindow(x)))
	if err != nil {
		return nil, fmt.Errorf("build delta: zstd encoder: %w", err)
	}
	return &deltaEncoder{enc: enc, old: old, dict: make([]byte, 0, maxDict), patchMax: maxPatch(x.MaxChunk())}, nil
}

// keep writes chunk i's best delta to w and its record to raw (version 2
// records when v2), and counts it.
func (res *DeltaResult) keep(w io.Writer, raw []byte, i int, c Chunk, best *deltaEncoder, v2 bool) ([]byte, error) {
	if _, err := w.Write(best.frame); err != nil {
		return raw, fmt.Errorf("build delta: write: %w", err)
	}
	dc := DeltaChunk{Chunk: i, Length: len(best.frame), N: len(best.ranges), Ranges: best.ranges}
	if best.how == HowDiff || best.how == HowDiffShift {
		dc.Method = deltaMethodDiff
		res.ByDiff++
	}
	if v2 {
		raw = appendDeltaRecord2(raw, dc)
	} else {
		var rec [DeltaRecordSize]byte
		putDeltaRecord(rec[:], dc)
		raw = append(raw, rec[:]...)
	}
	if best.how == HowFile || best.how == HowDiff {
		res.ByFile++
	}
	res.Count++
	res.DeltasSize += int64(len(best.frame))
	res.Rebuilt += int64(c.Length)
	res.RebuiltStored += int64(c.StoreLength)
	return raw, nil
}

// scanOld cuts the older image as x cuts, listing its chunks and their pieces, and
// hashes it whole into sum.
func scanOld(ctx context.Context, r io.Reader, x *Index, sum *[sha256.Size]byte) (*Have, *similar, error) {
	h := sha256.New()
	have, sim := &Have{}, newSimilar()
	add := func(b []byte, off int64) {
		if !AllZero(b) {
			have.Add(sha256.Sum256(b), off)
			sim.addOld(b, off)
		}
	}
	if x.Chunking() == ota.ChunkingCDC {
		c := newCutter(r, CDCFor(x.ChunkSize()), h)
		for {
			if err := ctx.Err(); err != nil {
				return nil, nil, fmt.Errorf("build delta: %w", err)
			}
			k, err := c.next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, nil, fmt.Errorf("build delta: older image: %w", err)
			}
			if k.data != nil {
				add(k.data, k.off)
			}
		}
	} else {
		buf := make([]byte, x.ChunkSize())
		for off := int64(0); ; off += int64(len(buf)) {
			if err := ctx.Err(); err != nil {
				return nil, nil, fmt.Errorf("build delta: %w", err)
			}
			n, err := io.ReadFull(r, buf)
			h.Write(buf[:n])
			if n > 0 {
				add(buf[:n], off)
			}
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				break
			}
			if err != nil {
				return nil, nil, fmt.Errorf("build delta: older image at %d: %w", off, err)
			}
		}
	}
	h.Sum(sum[:0])
	return have, sim, nil
}

// neighbourShifts are the shifts of the nearest chunks before and after chunk i that
// the older image holds: what moved with them, light as a guess.
func neighbourShifts(x *Index, i int, heldAt func(int) (int64, bool)) []shift {
	var out []shift
	for _, step := range []int{-1, 1} {
		for j, n := i+step, 0; j >= 0 && j < x.Count() && n < 8; j, n = j+step, n+1 {
			if x.Chunk(j).Kind == KindZero {
				continue
			}
			if at, ok := heldAt(j); ok {
				out = append(out, shift{by: at - x.Chunk(j).Offset, weight: 1})
				break
			}
		}
	}
	return out
}

// deltaWindow is the zstd window a delta of x's chunks needs: the dictionary and the
// chunk, rounded up to a power of two.
func deltaWindow(x *Index) int {
	n := MaxDict(x) + x.MaxChunk()
	return 1 << bits.Len64(uint64(n-1))
}

// deltaEncoder keeps the smallest delta of one chunk among the dictionaries tried.
type deltaEncoder struct {
	enc     *zstd.Encoder
	old     io.ReaderAt
	dict    []byte
	out     [2][]byte // the best frame so far and the one being made
	frame   []byte    // the best: out[cur]
	cur     int
	ranges  []Range
	how     DeltaHow
	dictLen int
	// Binary diffs: the source of the last file diffed, by its key, and a
	// zstd encoder without dictionary for the patches (deltadiffenc.go).
	srcKey   int
	src      *diffSource
	penc     *zstd.Encoder
	patchMax int64
}

func (e *deltaEncoder) reset() { e.frame, e.ranges, e.how = nil, nil, HowWhole }

// try compresses b against the older image's ranges rs, kept when smaller than the
// best so far.
func (e *deltaEncoder) try(b []byte, rs []Range, how DeltaHow) error {
	if len(rs) == 0 {
		return nil
	}
	dict := e.dict[:0]
	for _, r := range rs {
		n := len(dict)
		dict = dict[:n+int(r.Len)]
		if _, err := e.old.ReadAt(dict[n:], r.Off); err != nil {
			return fmt.Errorf("build delta: read the older image at %d: %w", r.Off, err)
		}
	}
	if err := e.enc.ResetWithOptions(nil, zstd.WithEncoderDictRaw(0, dict)); err != nil {
		return fmt.Errorf("build delta: %w", err)
	}
	k := 1 - e.cur // the buffer the best frame is not in
	e.out[k] = e.enc.EncodeAll(b, e.out[k][:0])
	e.consider(k, rs, how, len(dict))
	return nil
}

// consider keeps the frame in out[k] if it is the smallest so far; of two as
// small, the one reading less of the booted slot.
func (e *deltaEncoder) consider(k int, rs []Range, how DeltaHow, reads int) {
	if n := len(e.out[k]); e.frame == nil || n < len(e.frame) || n == len(e.frame) && reads < e.dictLen {
		e.frame, e.cur, e.ranges, e.how, e.dictLen = e.out[k], k, slices.Clone(rs), how, reads
	}
}
