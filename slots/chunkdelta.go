package slots

import (
	"context"

	"github.com/otad/otad/payload"
)

// sourceOf is the source of the chunks the plan fetches from file.
func sourceOf(file payload.File) payload.Source {
	if file == payload.FileDelta {
		return payload.FromDelta
	}
	return payload.FromNetwork
}

// dropDeltas gives up the delta file after err, once for all lanes: every
// delta still to come is fetched whole from the store.
func (n *network) dropDeltas(err error) {
	n.noDeltas.Store(true)
	n.in.progress.dropDeltas()
	n.warnOnce.Do(func() {
		warnDeltaFailed(n.in.log, n.in.deltaOf.URL, err)
	})
}

// fetchWhole brings the chunks of f, a fetch of the delta file, from chunk
// at on whole from the store, in requests of neighbouring chunks (their
// stored bytes touching, up to maxSpan) as the plan makes them.
func (n *network) fetchWhole(ctx context.Context, l *lane, f payload.Fetch, at int) error {
	var run *payload.Fetch
	flush := func() error {
		if run == nil {
			return nil
		}
		_, err := n.fetch(ctx, l, *run, payload.FileStore, payload.FromDelta)
		run = nil
		return err
	}
	for i := at; i < f.End; i++ {
		if !n.planned(payload.FromDelta, i) {
			continue
		}
		c := n.in.x.Chunk(i)
		off, length := c.StoreOffset, int64(c.StoreLength)
		if run != nil && (off != run.Offset+run.Length || off+length-run.Offset > n.in.ct.maxSpan) {
			if err := flush(); err != nil {
				return err
			}
		}
		if run == nil {
			run = &payload.Fetch{Offset: off, First: i}
		}
		run.Length, run.End = off+length-run.Offset, i+1
	}
	return flush()
}
