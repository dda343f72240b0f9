package payload

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"

	"github.com/otad/otad/ota"
)

// Source is where an install takes a chunk from. docs/contract/chunked.md order: the first that has it.
type Source uint8

// Chunk sources, in the order they are tried.
const (
	FromTarget  Source = iota // the target slot holds it already (written before a restart)
	FromZero                  // an all-zero chunk: write zeros
	FromBooted                // the booted slot holds the same bytes: copy them
	FromNetwork               // fetch it from the store
	FromDelta                 // fetch its delta and rebuild it from the booted slot's older image
)

func (s Source) String() string {
	return enumName([]string{FromTarget: "target", FromZero: "zero", FromBooted: "booted", FromNetwork: "network", FromDelta: "delta"}, s, "source")
}

// File is the file a Fetch reads: the store, or the delta file of the booted image.
type File uint8

// The files an install fetches from.
const (
	FileStore File = iota
	FileDelta
)

// DefaultMaxSpan bounds one range request when PlanInput.MaxSpan is 0.
const DefaultMaxSpan = 4 << 20

// BootedChunks lists the chunks of the booted slot's image from its kept index, first
// occurrence of each hash. Zero chunks are left out: zeros need no source.
func BootedChunks(x *Index) *Have {
	h := &Have{entries: make([]haveEntry, 0, x.Count())}
	for i := range x.Count() {
		if c := x.Chunk(i); c.Kind != KindZero {
			h.Add(c.SHA256, c.Offset)
		}
	}
	return h
}

// ScanChunks lists the chunks of r, hashed in pieces of chunkSize bytes up to limit
// bytes or r's end, like BootedChunks: for a booted slot whose image has no kept index
// (a factory image), hashed once. A short last piece is listed too.
func ScanChunks(ctx context.Context, r io.Reader, chunkSize, limit int64) (*Have, error) {
	if !ValidChunkSize(chunkSize) {
		return nil, fmt.Errorf("scan chunks: chunk size %d is not a power of two from %d to %d", chunkSize, MinChunkSize, MaxChunkSize)
	}
	h := &Have{}
	buf := make([]byte, chunkSize)
	r = io.LimitReader(r, limit)
	for off := int64(0); ; off += chunkSize {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("scan chunks: %w", err)
		}
		n, err := io.ReadFull(r, buf)
		if n > 0 && !AllZero(buf[:n]) {
			h.Add(sha256.Sum256(buf[:n]), off)
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return h, nil
		}
		if err != nil {
			return nil, fmt.Errorf("scan chunks: read at offset %d: %w", off, err)
		}
	}
}

// ScanFor lists the chunks of r, up to limit bytes or r's end, cut as x cuts its
// image: in fixed chunks of x's size, or content-defined as x's chunking does, so that
// a booted slot without a kept index (a factory image) is hashed once, and every chunk
// it shares with x's image is found wherever it lies.
func ScanFor(ctx context.Context, r io.Reader, x *Index, limit int64) (*Have, error) {
	if x.Chunking() != ota.ChunkingCDC {
		return ScanChunks(ctx, r, x.ChunkSize(), limit)
	}
	h := &Have{}
	c := newCutter(io.LimitReader(r, limit), CDCFor(x.ChunkSize()), nil)
	for {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("scan chunks: %w", err)
		}
		k, err := c.next()
		if errors.Is(err, io.EOF) {
			return h, nil
		}
		if err != nil {
			return nil, fmt.Errorf("scan chunks: %w", err)
		}
		if k.data != nil && !AllZero(k.data) {
			h.Add(sha256.Sum256(k.data), k.off)
		}
	}
}

// PlanInput is what an install knows before it fetches anything.
type PlanInput struct {
	// Next is the checkpoint: chunks before it are written and synced.
	Next int
	// TargetHas reports whether the target slot's bytes at chunk i already hash to
	// the index's; nil means the target holds nothing usable.
	TargetHas func(i int) bool
	// Booted lists the booted slot's chunks; nil means nothing to reuse.
	Booted *Have
	// Delta, when set, has deltas of chunks against the image the booted slot
	// holds: those it lists are fetched as deltas (FileDelta) rather than whole.
	Delta *Delta
	// MaxSpan bounds the bytes of one range request (0: DefaultMaxSpan); a chunk
	// larger than it still gets a request of its own.
	MaxSpan int64
	// MaxGap is how many unneeded store bytes a request may carry between two
	// needed chunks rather than split in two; 0 merges only touching ranges.
	MaxGap int64
}

// Step is one chunk's source.
type Step struct {
	Chunk  int
	Source Source
	// BootedOffset is where a FromBooted chunk lies in the booted slot.
	BootedOffset int64
}

// Fetch is one single-range request for bytes [Offset, Offset+Length) of a file (the
// plan's Files say which). The chunks among [First, End) fetched from it (FromNetwork
// for the store, FromDelta for the delta file) lie inside it; bytes of others are
// skipped. No two fetches' chunks interleave, so the chunks come in order one fetch
// after another.
type Fetch struct {
	Offset, Length int64
	First, End     int
}

// Plan is the rest of an install: a step for every chunk from the checkpoint on, and
// the requests that bring the network chunks, in store order.
type Plan struct {
	Steps   []Step
	Fetches []Fetch
	// Files is the file each fetch reads.
	Files []File
	// Image bytes each source provides, and bytes the requests carry.
	TargetBytes, ZeroBytes, BootedBytes, NetworkBytes, DeltaBytes int64
	FetchBytes                                                    int64
}

// MakePlan decides, without I/O, where each chunk from in.Next on comes from and merges
// the store ranges of neighbouring network chunks into requests of at most MaxSpan
// bytes.
func MakePlan(x *Index, in PlanInput) (*Plan, error) {
	if in.Next < 0 || in.Next > x.Count() {
		return nil, fmt.Errorf("plan: checkpoint chunk %d outside 0..%d", in.Next, x.Count())
	}
	if in.MaxSpan <= 0 {
		in.MaxSpan = DefaultMaxSpan
	}
	in.MaxGap = max(in.MaxGap, 0)
	p := &Plan{Steps: make([]Step, 0, x.Count()-in.Next)}
	for i := in.Next; i < x.Count(); i++ {
		c := x.Chunk(i)
		st := Step{Chunk: i}
		n := int64(c.Length)
		if in.TargetHas != nil && in.TargetHas(i) {
			st.Source = FromTarget
			p.TargetBytes += n
		} else if c.Kind == KindZero {
			st.Source = FromZero
			p.ZeroBytes += n
		} else if off, ok := in.Booted.Find(c.SHA256); ok {
			st.Source, st.BootedOffset = FromBooted, off
			p.BootedBytes += n
		} else if d, ok := in.Delta.Find(i); ok {
			st.Source = FromDelta
			p.DeltaBytes += n
			p.fetch(in, FileDelta, d.Offset, int64(d.Length), i)
		} else {
			st.Source = FromNetwork
			p.NetworkBytes += n
			p.fetch(in, FileStore, c.StoreOffset, int64(c.StoreLength), i)
		}
		p.Steps = append(p.Steps, st)
	}
	for _, f := range p.Fetches {
		p.FetchBytes += f.Length
	}
	return p, nil
}

// fetch adds chunk i's bytes [start, start+n) of file to the last request when it is
// of the same file, near enough and not too long, else to a new one.
func (p *Plan) fetch(in PlanInput, file File, start, n int64, i int) {
	end := start + n
	if k := len(p.Fetches) - 1; k >= 0 {
		f := &p.Fetches[k]
		if p.Files[k] == file && start-(f.Offset+f.Length) <= in.MaxGap && start >= f.Offset+f.Length && end-f.Offset <= in.MaxSpan {
			f.Length, f.End = end-f.Offset, i+1
			return
		}
	}
	p.Fetches = append(p.Fetches, Fetch{Offset: start, Length: n, First: i, End: i + 1})
	p.Files = append(p.Files, file)
}
