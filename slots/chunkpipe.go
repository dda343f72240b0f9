package slots

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/otad/otad/fetch"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/payload"
)

// piece is one chunk on its way to the slot, in chunk order, or a part of a zero
// run longer than a buffer.
type piece struct {
	chunk int
	off   int64 // where buf goes in the image
	buf   []byte
	back  []byte // the buffer to give back, when buf is a part of it
	write bool   // false: the target holds it already
	// unchecked: a raw chunk from the network the assembler checks as it
	// hashes it into the image (imageHash.checked)
	unchecked bool
	reused    bool        // taken from a slot on the device
	frame     bool        // buf is the chunk's delta, not yet decoded
	rebuilt   bool        // rebuilt from a delta against the booted slot
	more      bool        // a part of a zero run that goes on in the next piece
	pool      chan []byte // where buf goes back; nil for the shared zeros
	err       error
}

func (p piece) release() {
	if p.pool != nil {
		if p.back != nil {
			p.pool <- p.back
		} else {
			p.pool <- p.buf
		}
	}
}

// bufSize is the size of a chunk buffer: the largest chunk and the room a chunk is
// decoded in place with (payload.DecodeSlack), and with content-defined chunks (at
// any offset) room to read it in aligned blocks (readChunk).
func bufSize(x *payload.Index) int {
	if x.Chunking() == ota.ChunkingCDC {
		return int(x.MaxChunk()) + 2*alignment
	}
	return int(x.MaxChunk()) + alignment
}

// chunkBufs are the install's buffers, page aligned, outside the Go heap
// (mapBuffers): each lane's ring of decoded chunks (chunkring.go) and, one
// chunk long each, the lanes' compressed arrivals, the chunks read from the
// slots, one scratch buffer, and a buffer of zeros that is never written, so
// it costs no memory.
type chunkBufs struct {
	lanes  [][]byte // each lane's ring (chunkring.go)
	stored [][]byte
	local  [][]byte
	block  []byte   // local, as one block
	stage  [][]byte // the writer's staging buffers (chunkstage.go)
	// readback is the read-back's: the staging buffers as one block, idle
	// once the image is written, where an install that reuses nothing never
	// touched local.
	readback []byte
	scratch  []byte
	zeros    []byte
}

// ringFor is the size of each lane's ring for plan p, with chunk buffers of cs.
func (ct chunkTuning) ringFor(p *payload.Plan, cs int) int {
	if ct.cpus < 2 || p.NetworkBytes < p.DeltaBytes+p.BootedBytes {
		return ringSize(ct.laneBytesAided, cs)
	}
	return ringSize(ct.laneBytes, cs)
}

// ringSize is a lane's ring of about n bytes for chunk buffers of cs: two
// of the largest chunks at least, as the lanes' buffers were before they
// were packed.
func ringSize(n, cs int) int {
	return int(roundUp(int64(max(n, 2*cs)), alignment))
}

func (in *chunkInstall) buffers() (*chunkBufs, func(), error) {
	cs := bufSize(in.x)
	ct := in.ct
	// Mapped at the deeper ring's size: a lane whose ring is cut shorter
	// (ringFor, once the plan is made) never touches the rest, which then
	// costs no memory.
	perLane := ringSize(max(ct.laneBytes, ct.laneBytesAided), cs)
	local := max(2, ct.localBytes/cs)
	all, release, err := mapBuffers(ct.lanes+3, cs)
	if err != nil {
		return nil, nil, ota.Wrap(ota.CodeWriteFailed, err)
	}
	rings, releaseRings, err := mapBuffers(ct.lanes, perLane)
	if err != nil {
		release()
		return nil, nil, ota.Wrap(ota.CodeWriteFailed, err)
	}
	block, releaseBlock, err := mapBuffers(1, local*cs)
	if err != nil {
		releaseRings()
		release()
		return nil, nil, ota.Wrap(ota.CodeWriteFailed, err)
	}
	// Mapped whatever the slot: a slot written without them never touches
	// their pages, which then cost no memory.
	stage, releaseStage, err := mapBuffers(1, ct.stageBufs*ct.stageBytes)
	if err != nil {
		releaseBlock()
		releaseRings()
		release()
		return nil, nil, ota.Wrap(ota.CodeWriteFailed, err)
	}
	b := &chunkBufs{lanes: rings, block: block[0], stage: split(stage[0], ct.stageBufs, ct.stageBytes), readback: stage[0]}
	b.stored, all = all[:ct.lanes+1], all[ct.lanes+1:]
	b.scratch, b.zeros = all[0], all[1]
	for i := range local {
		b.local = append(b.local, b.block[i*cs:(i+1)*cs:(i+1)*cs])
	}
	return b, func() { releaseStage(); releaseBlock(); releaseRings(); release() }, nil
}

// write runs the install from the checkpoint on:
//
//	lanes:     range requests → chunks decoded and checked against the index
//	assembler: each chunk from its source (the lanes for the network), in order → pieces
//	writer:    pieces → vectored pwrite, writeback started as it goes, buffers back, checkpoints due
//	committer: fdatasync the slot, then replace the checkpoint file
//
// Every chunk is checked against the authenticated index before it is
// written; the read-back checks the slot against the index and sha256, or
// without one the image is hashed as it is written (imageHash: from the
// staging buffers, chunkstage.go, or for a Writer in a stage before it).
func (in *chunkInstall) write(ctx context.Context, bufs *chunkBufs) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var ih *imageHash
	if !in.job.Readback {
		var err error
		if ih, err = in.startImageHash(bufs.scratch); err != nil {
			return err
		}
	}
	net, err := in.network(bufs)
	if err != nil {
		return err
	}
	defer net.close()
	// With pair, the assembler hashes the image; the lanes leave raw
	// chunks to it.
	var assembled *imageHash
	if ih != nil && ih.pair && pairPays(in.plan, in.x) {
		assembled, ih, net.unchecked = ih, nil, true
	}
	net.start(ctx)
	local := make(chan []byte, len(bufs.local))
	for _, b := range bufs.local {
		local <- b
	}
	pieces := make(chan piece, len(bufs.local))
	due := make(chan checkpoint, 1)
	var wg sync.WaitGroup
	fail := func(err error) {
		if err != nil {
			cancel(err)
		}
	}
	wg.Go(func() {
		defer close(pieces)
		fail(in.assemble(ctx, net, local, bufs.zeros, assembled, pieces))
	})
	// A slot written with O_DIRECT hashes its staging buffers as they are
	// written; any other has the image's hash a stage of its own, beside
	// the writer, as in the stream install (Write's pipeline).
	toWrite, stagedHash := pieces, ih
	if ih != nil && in.tgt.directSlot() == nil {
		hashed := make(chan piece, len(bufs.local))
		wg.Go(func() {
			defer close(hashed)
			fail(in.hashPieces(ctx, pieces, hashed, ih))
		})
		toWrite, stagedHash = hashed, nil
	}
	wg.Go(func() {
		defer close(due)
		fail(in.writeLoop(ctx, toWrite, due, bufs.stage, stagedHash))
	})
	wg.Go(func() { fail(in.commitLoop(ctx, due)) })
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return in.classify(err)
	}
	return nil
}

func (in *chunkInstall) network(bufs *chunkBufs) (*network, error) {
	req := in.job.request(in.job.URL, 0, in.tun, &in.fetched)
	src, err := fetch.OpenRanges(req, in.job.Expect.StoreSize)
	if err != nil {
		return nil, err
	}
	n := &network{in: in, src: src, req: req, fetches: in.plan.Fetches}
	if in.plan.DeltaBytes > 0 {
		d := in.deltaOf
		if n.dsrc, err = fetch.OpenRangesNamed(in.job.request(d.URL, 0, in.tun, &in.fetched), d.Size, fmt.Sprintf("payload.chunks.deltas[%d].size", in.deltaAt)); err != nil {
			src.Close()
			return nil, err
		}
	}
	// One decoder for every lane: each decodes into its own buffers, so the
	// install holds one set of zstd state, not one a lane.
	if n.dec, err = payload.NewSharedDecoder(in.x, in.ct.decoders); err != nil {
		n.close()
		return nil, ota.Wrap(ota.CodeWriteFailed, err)
	}
	size := in.ct.ringFor(in.plan, bufSize(in.x))
	for i := range in.ct.lanes {
		n.lanes = append(n.lanes, newLane(n.dec, bufs.lanes[i][:size], bufs.stored[i]))
	}
	n.mine = newLane(n.dec, nil, bufs.stored[in.ct.lanes])
	for _, l := range append(n.lanes, n.mine) {
		l.packed = in.x.Prefixed()
	}
	return n, nil
}

func (in *chunkInstall) classify(err error) error {
	var e *ota.Error
	switch {
	case errors.As(err, &e):
		return err
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return ota.Wrap(ota.CodeCancelled, fmt.Errorf("write %s to %s: %w", in.job.URL, in.job.targetName(), err))
	}
	return ota.Wrap(ota.CodeDownloadFailed, fmt.Errorf("write %s to %s: %w", in.job.URL, in.job.targetName(), err))
}

// assemble takes every chunk of the plan from its source, checked against
// the index, and hands them on in order; with ih, hashing them into the
// image, and checking those the lanes left unchecked as it does.
func (in *chunkInstall) assemble(ctx context.Context, net *network, local chan []byte, zeros []byte, ih *imageHash, out chan<- piece) error {
	for _, st := range in.plan.Steps {
		c := in.x.Chunk(st.Chunk)
		var p piece
		var err error
		switch st.Source {
		case payload.FromZero:
			if ih != nil {
				ih.zeros(c.Length, zeros)
			}
			if err := sendZeros(ctx, c, zeros, out); err != nil {
				return err
			}
			in.remember(piece{}, c)
			continue
		case payload.FromNetwork, payload.FromDelta:
			p, err = net.next(ctx, c)
			switch {
			case err != nil:
			case p.frame:
				p, err = in.fromDelta(ctx, net, p, c, local)
			case in.packed(c):
				p, err = in.unpack(ctx, net, p, c)
			}
		default:
			p, err = in.fromSlot(ctx, net, st, c, local)
		}
		if err == nil && ih != nil {
			p, err = in.hashInto(ctx, net, ih, p, c)
		}
		if err != nil {
			return err
		}
		in.remember(p, c)
		p.off = c.Offset
		select {
		case out <- p:
		case <-ctx.Done():
			p.release()
			return context.Cause(ctx)
		}
	}
	return nil
}

// pairPays: the network brings at least half the image's bytes still to
// write as raw chunks. The assembler then checks them and hashes the image
// in one pass; otherwise it would hash the image alone, in series with
// reading and checking the chunks from the slots or rebuilding them, which
// a stage of its own does beside them (`make bench`'s 1% update ran at
// 0.72x the time with the image hashed beside the assembler).
func pairPays(p *payload.Plan, x *payload.Index) bool {
	var raw, all int64
	for _, st := range p.Steps {
		c := x.Chunk(st.Chunk)
		all += int64(c.Length)
		if st.Source == payload.FromNetwork && c.Kind == payload.KindRaw {
			raw += int64(c.Length)
		}
	}
	return 2*raw >= all
}

// hashInto hashes p, chunk c, into the image; a chunk the lanes left
// unchecked is checked in the same pass, and one that arrived wrong is
// fetched once more (a second wrong arrival is final: chunk_mismatch).
func (in *chunkInstall) hashInto(ctx context.Context, net *network, ih *imageHash, p piece, c payload.Chunk) (piece, error) {
	if !p.unchecked {
		if err := ih.feed(p); err != nil {
			p.release()
			return piece{}, err
		}
		return p, nil
	}
	p.unchecked = false
	if ih.checked(c, p.buf) {
		return p, nil
	}
	b, err := net.fetchOne(ctx, net.mine, c, p.buf)
	if err != nil {
		p.release()
		return piece{}, err
	}
	p.buf = b
	ih.write(b)
	return p, nil
}

// writeLoop writes pieces in order, as many neighbours as are waiting in
// one vectored write (through aligned staging buffers with O_DIRECT where
// the slot takes it: chunkstage.go), gives their buffers back, reports
// progress and hands the committer a checkpoint when one is due
// (chunkTuning); at most one waits while another is written.
func (in *chunkInstall) writeLoop(ctx context.Context, pieces <-chan piece, due chan<- checkpoint, stage [][]byte, ih *imageHash) error {
	w := &chunkWriter{in: in, due: due, cp: checkpoint{Key: in.key, Offer: in.job.Offer}}
	if r := in.resumed; r != nil {
		w.cp = *r
	}
	w.lastAt, w.lastDone, w.done = time.Now(), w.cp.Done, w.cp.Done
	var s flusher
	var err error
	if d := in.tgt.directSlot(); d != nil {
		s = d.flusher(in.tun.syncLag, func(int64) {})
		err = w.staged(ctx, pieces, newStager(d, s, stage, ih))
	} else {
		s = in.tgt.flusher(in.tun.syncLag)
		err = w.batched(ctx, pieces, s)
	}
	if err != nil {
		return err
	}
	if err := s.finish(in.job.Size); err != nil {
		return err
	}
	w.cp.Fetched = in.progress.fetched0 + in.fetched.Load()
	in.counts = w.cp
	in.progress.report(ota.Downloading, w.cp.Done, w.cp, true)
	return nil
}

// chunkWriter is writeLoop's count of what is written.
type chunkWriter struct {
	in       *chunkInstall
	due      chan<- checkpoint
	cp       checkpoint
	done     int64 // image bytes written, zero runs' parts included
	lastAt   time.Time
	lastDone int64
}

// staged writes the pieces through st: each is accounted for once the write
// of its last byte returned.
func (w *chunkWriter) staged(ctx context.Context, pieces <-chan piece, st *stager) error {
	var wg sync.WaitGroup
	wg.Go(st.run)
	if st.ih != nil {
		wg.Go(st.hash)
	}
	defer wg.Wait()
	defer st.close()
	for p := range pieces {
		// Nothing more is written once the install has failed.
		if ctx.Err() != nil {
			p.release()
			return context.Cause(ctx)
		}
		var err error
		if p.write {
			err = st.add(ctx, p, w.piece)
		} else if err = st.drain(ctx, w.piece); err == nil {
			// The target holds it: its place in the order is all it needs,
			// and its bytes in the image's hash, after all before it.
			if st.ih != nil {
				err = st.ih.feed(p)
			}
			p.release()
			if err == nil {
				err = w.piece(p)
			}
		}
		if err == nil {
			err = st.poll(ctx, w.piece)
		}
		if err == nil {
			err = w.progress(ctx)
		}
		if err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if err := st.drain(ctx, w.piece); err != nil {
		return err
	}
	return w.progress(ctx)
}

// batched writes the pieces with vectored writes through the page cache,
// starting writeback as it goes.
func (w *chunkWriter) batched(ctx context.Context, pieces <-chan piece, s flusher) error {
	in := w.in
	maxBatch := max(1, in.ct.batchBytes/int(in.x.MaxChunk()))
	batch := make([]piece, 0, maxBatch)
	iov := make([][]byte, 0, maxBatch)
	var started int64 // writeback started up to here
	for open := true; open; {
		var err error
		if batch, open, err = nextBatch(ctx, pieces, batch[:0], maxBatch); err != nil {
			return err
		}
		// Nothing more is written once the install has failed.
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if len(batch) == 0 {
			break
		}
		if err := in.writeBatch(batch, iov); err != nil {
			return err
		}
		// Writeback is started in pieces as large as the stream writer's:
		// many small ones make the storage slower.
		last := batch[len(batch)-1]
		if end := last.off + int64(len(last.buf)); end-started >= int64(in.tun.chunk) {
			if err := s.advance(end); err != nil {
				return err
			}
			started = end
		}
		for _, p := range batch {
			p.release()
			if err := w.piece(p); err != nil {
				return err
			}
		}
		if err := w.progress(ctx); err != nil {
			return err
		}
	}
	return nil
}

// piece moves the checkpoint past p, written (or held), once it completes
// its chunk.
func (w *chunkWriter) piece(p piece) error {
	if p.more {
		w.done += int64(len(p.buf))
		return nil
	}
	c := w.in.x.Chunk(p.chunk)
	n := int64(c.Length)
	w.cp.Next, w.cp.Done, w.done = p.chunk+1, c.Offset+n, c.Offset+n
	switch {
	case p.reused:
		w.cp.Reused += n
	case p.rebuilt:
		w.cp.Delta += n
	}
	return nil
}

// progress reports progress and hands the committer a checkpoint when one
// is due.
func (w *chunkWriter) progress(ctx context.Context) error {
	in := w.in
	w.cp.Fetched = in.progress.fetched0 + in.fetched.Load()
	in.progress.report(ota.Downloading, w.done, w.cp, false)
	since := time.Since(w.lastAt)
	if (w.cp.Done-w.lastDone >= in.ct.checkpointBytes && since >= in.ct.checkpointGap) || since >= in.ct.checkpointEvery {
		select {
		case w.due <- w.cp:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		w.lastAt, w.lastDone = time.Now(), w.cp.Done
	}
	return nil
}

// nextBatch waits for a piece, then takes those already waiting, up to
// limit; open is false once pieces is closed.
func nextBatch(ctx context.Context, pieces <-chan piece, batch []piece, limit int) ([]piece, bool, error) {
	select {
	case p, ok := <-pieces:
		if !ok {
			return batch, false, nil
		}
		batch = append(batch, p)
	case <-ctx.Done():
		return batch, false, context.Cause(ctx)
	}
	for len(batch) < limit {
		select {
		case p, ok := <-pieces:
			if !ok {
				return batch, false, nil
			}
			batch = append(batch, p)
		default:
			return batch, true, nil
		}
	}
	return batch, true, nil
}

// writeBatch writes the runs of consecutive pieces that need writing.
func (in *chunkInstall) writeBatch(batch []piece, iov [][]byte) error {
	for i := 0; i < len(batch); {
		if !batch[i].write {
			i++
			continue
		}
		off := batch[i].off
		iov = iov[:0]
		for ; i < len(batch) && batch[i].write; i++ {
			iov = append(iov, batch[i].buf)
		}
		if err := in.tgt.writev(iov, off); err != nil {
			return ota.Wrap(ota.CodeWriteFailed, fmt.Errorf("write at offset %d of %s: %w", off, in.job.targetName(), err))
		}
	}
	return nil
}

// pwritev writes all of iov at off, continuing after short writes.
func pwritev(f *os.File, iov [][]byte, off int64) error {
	for len(iov) > 0 {
		n, err := unix.Pwritev(int(f.Fd()), iov, off)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return err
		}
		off += int64(n)
		for n > 0 && len(iov) > 0 {
			if n < len(iov[0]) {
				iov[0] = iov[0][n:]
				n = 0
			} else {
				n -= len(iov[0])
				iov = iov[1:]
			}
		}
		for len(iov) > 0 && len(iov[0]) == 0 {
			iov = iov[1:]
		}
	}
	return nil
}

// commitLoop makes checkpoints durable: the slot first, then the file that
// says how far it is written.
func (in *chunkInstall) commitLoop(ctx context.Context, due <-chan checkpoint) error {
	for cp := range due {
		if ctx.Err() != nil {
			continue
		}
		if err := in.tgt.sync(); err != nil {
			return ota.Wrap(ota.CodeWriteFailed, fmt.Errorf("fdatasync %s: %w", in.job.targetName(), err))
		}
		if hook := in.ct.beforeCheckpoint; hook != nil {
			if err := hook(cp.Next); err != nil {
				return err
			}
		}
		in.state.saveCheckpoint(&cp)
	}
	return nil
}
