package slots

import (
	"context"
	"io"

	"github.com/otad/otad/payload"
)

// bootedSlot is what an install reads of the booted slot: chunks it reuses,
// the dictionaries of deltas, and the scan when it makes one.
type bootedSlot interface {
	io.ReaderAt
	io.Closer
	Name() string
}

// placedEntry reports whether the journal names the image of a placed deltas
// entry (payload.chunks.deltas[k].placed) that this install would use: the
// signer knew the image the booted slot holds, so its delta index says where
// that image holds each chunk (docs/contract/chunked.md).
func (in *chunkInstall) placedEntry() bool {
	job := in.job
	if job.Chunks == nil || job.Chunks.Deltas == nil {
		return false
	}
	k := job.Chunks.DeltaFrom(in.bootedImage)
	if k < 0 {
		return false
	}
	d := (*job.Chunks.Deltas)[k]
	return d.Placed && d.FromSize <= in.bootedSize && d.Fetch < job.Expect.IndexSize+job.Expect.StoreSize
}

// placedOrScan is the booted slot's chunk list when bootedChunks left it to
// the delta index (in.placed): from the delta index once it is fetched and
// checked, else from one scan of the slot, as without one.
func (in *chunkInstall) placedOrScan(ctx context.Context, have *payload.Have) (*payload.Have, error) {
	if !in.placed {
		return have, nil
	}
	if in.delta == nil {
		// No delta index after all (not fetched, or refused): find them.
		return in.scanBooted(ctx)
	}
	return placedChunks(in.x, in.delta, min(in.deltaOf.FromSize, in.bootedSize)), nil
}

// placedChunks lists where the older image holds the chunks of x, as its
// delta index d says: a copy record's range, and for a chunk no record names
// the same offset, inside the older image's size (the signer names every
// other place it knew). Nothing is
// read: each chunk taken on the strength of it is read and checked by its
// SHA-256 then, and fetched whole when it does not match.
func placedChunks(x *payload.Index, d *payload.Delta, size int64) *payload.Have {
	h := &payload.Have{}
	for i := range x.Count() {
		c := x.Chunk(i)
		if c.Kind == payload.KindZero {
			continue
		}
		if dc, ok := d.Find(i); ok {
			if at, ok := dc.Copy(c); ok {
				h.Add(c.SHA256, at)
			}
			continue
		}
		if c.Offset+int64(c.Length) <= size {
			h.Add(c.SHA256, c.Offset)
		}
	}
	return h
}
