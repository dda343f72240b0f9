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
)

func (s Source) String() string {
	return enumName([]string{FromTarget: "target", FromZero: "zero", FromBooted: "booted", FromNetwork: "network"}, s, "source")
}

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
		if n > 0 && !allZero(buf[:n]) {
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
		if k.data != nil && !allZero(k.data) {
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

// Fetch is one single-range request for store bytes [Offset, Offset+Length). The
// FromNetwork chunks among [First, End) lie inside it; bytes of others are skipped.
type Fetch struct {
	Offset, Length int64
	First, End     int
}

// Plan is the rest of an install: a step for every chunk from the checkpoint on, and
// the requests that bring the network chunks, in store order.
type Plan struct {
	Steps   []Step
	Fetches []Fetch
	// Image bytes each source provides, and store bytes the requests carry.
	TargetBytes, ZeroBytes, BootedBytes, NetworkBytes int64
	FetchBytes                                        int64
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
		} else {
			st.Source = FromNetwork
			p.NetworkBytes += n
			start, end := c.StoreOffset, c.StoreOffset+int64(c.StoreLength)
			if f := p.lastFetch(); f != nil && start-(f.Offset+f.Length) <= in.MaxGap && end-f.Offset <= in.MaxSpan {
				f.Length, f.End = end-f.Offset, i+1
			} else {
				p.Fetches = append(p.Fetches, Fetch{Offset: start, Length: end - start, First: i, End: i + 1})
			}
		}
		p.Steps = append(p.Steps, st)
	}
	for _, f := range p.Fetches {
		p.FetchBytes += f.Length
	}
	return p, nil
}

func (p *Plan) lastFetch() *Fetch {
	if len(p.Fetches) == 0 {
		return nil
	}
	return &p.Fetches[len(p.Fetches)-1]
}
