package slots

import (
	"context"
	"fmt"

	"github.com/otad/otad/ota"
)

// A chunked install writes a File slot with O_DIRECT too (issue 33): through
// the page cache, its copy, writeback and the pages dropped behind it cost
// more CPU than the SHA-256 of the image. Content-defined chunks lie at any
// offset, so the writer copies the pieces, in image order, into aligned
// staging buffers (stager) and a goroutine of its own writes each full one
// with O_DIRECT while the next fills, as the stream writer does. A buffer
// is handed on only when full, so every direct write starts and ends on a
// block boundary; only where a run of written pieces starts or ends inside
// a block (the image's end, a chunk the target already holds after a
// restart) is that block's part written through the page cache, which the
// fdatasync of the next checkpoint flushes with the rest.
//
// A checkpoint names only bytes on storage (docs/contract/chunked.md): a
// piece counts as written (stager.account) once the write that carried its
// last byte has returned, not when it was copied, and the committer
// fdatasyncs the slot before it replaces the checkpoint file, so the
// buffered parts and the device's write cache are flushed first.
//
// With read-back off, the image's SHA-256 is taken from the staging
// buffers, in order, by a goroutine of its own while they are written
// (stager.hash); a chunk the target already holds is hashed by the writer
// once everything before it is (chunkWriter.staged). The hash is then off
// the path of the lanes' buffers, which go back as soon as they are copied:
// as a stage between the assembler and the writer it held each one for its
// hash, and the lanes, two buffers each, waited for them (docs/design.md,
// "Writing a slot").

// staged is a staging buffer on its way to the slot: buf[from:to] goes at
// base+from. final: the run ends there, its last partial block is written
// too.
type staged struct {
	buf      []byte
	base     int64
	from, to int
	final    bool
	err      error
}

// end is where the buffer's written bytes end in the image.
func (b staged) end() int64 { return b.base + int64(b.to) }

// stager gathers the pieces into staging buffers and accounts for them as
// their writes return.
type stager struct {
	d    *directTarget
	fl   flusher
	full chan staged // to the writing goroutine
	back chan staged // written, with the buffer to fill again
	// With ih (read-back off), each buffer is also handed to a hashing
	// goroutine, which hashes them in the order they are handed while they
	// are written; a buffer comes back once both are done.
	ih      *imageHash
	toHash  chan staged
	hashed  chan struct{}
	spare   [][]byte
	cur     staged  // being filled; cur.buf nil: none
	pending []piece // copied, not yet written, in order
	inFly   int     // buffers handed on and not back
	written int64   // the image is written up to here (as far as pending goes)
}

func newStager(d *directTarget, fl flusher, bufs [][]byte, ih *imageHash) *stager {
	s := &stager{d: d, fl: fl, full: make(chan staged, len(bufs)), back: make(chan staged, len(bufs)), spare: append([][]byte(nil), bufs...), ih: ih}
	if ih != nil {
		s.toHash, s.hashed = make(chan staged, len(bufs)), make(chan struct{}, len(bufs))
	}
	return s
}

// run writes the buffers handed on until full is closed.
func (s *stager) run() {
	for b := range s.full {
		b.err = s.write(b)
		if s.ih != nil {
			// The hashing goroutine takes the buffers in the same order.
			<-s.hashed
		}
		s.back <- b
	}
}

// hash hashes the buffers handed on, in order, until toHash is closed.
func (s *stager) hash() {
	for b := range s.toHash {
		s.ih.write(b.buf[b.from:b.to])
		s.hashed <- struct{}{}
	}
}

// write writes buf[from:to] at base+from: a head inside a block through the
// page cache, the rest with O_DIRECT, the partial block at the end (final
// only) through the page cache (directTarget.writev).
func (s *stager) write(b staged) error {
	off := b.base + int64(b.from)
	body := b.buf[b.from:b.to]
	if head := int(roundUp(off, alignment) - off); head > 0 {
		head = min(head, len(body))
		if err := pwritev(s.d.f, [][]byte{body[:head]}, off); err != nil {
			return err
		}
		body, off = body[head:], off+int64(head)
	}
	if len(body) > 0 {
		if err := s.d.writev([][]byte{body}, off); err != nil {
			return err
		}
	}
	return s.fl.advance(b.end())
}

// add copies p (to be written) into the staging buffers, handing each on as
// it fills; p's buffer goes back at once.
func (s *stager) add(ctx context.Context, p piece, done func(piece) error) error {
	if s.cur.buf != nil && p.off != s.cur.end() {
		// Not contiguous (never, as the writer sends them): the run ends.
		if err := s.drain(ctx, done); err != nil {
			return err
		}
	}
	b := p.buf
	for len(b) > 0 {
		if s.cur.buf == nil {
			if err := s.take(ctx, done); err != nil {
				return err
			}
			at := p.off + int64(len(p.buf)-len(b))
			s.cur.base = at / alignment * alignment
			s.cur.from = int(at - s.cur.base)
			s.cur.to = s.cur.from
		}
		n := copy(s.cur.buf[s.cur.to:], b)
		s.cur.to += n
		b = b[n:]
		if s.cur.to == len(s.cur.buf) {
			s.hand(false)
		}
	}
	p.release()
	p.pool = nil // given back: account only reads its length
	s.pending = append(s.pending, p)
	return nil
}

// take makes a spare buffer the current one, waiting for one to come back.
func (s *stager) take(ctx context.Context, done func(piece) error) error {
	for len(s.spare) == 0 {
		if err := s.wait(ctx, done); err != nil {
			return err
		}
	}
	s.cur = staged{buf: s.spare[len(s.spare)-1]}
	s.spare = s.spare[:len(s.spare)-1]
	return nil
}

// hand hands the current buffer on to be written; a full one continues, in
// the next, at its end (a block boundary).
func (s *stager) hand(final bool) {
	s.cur.final = final
	s.full <- s.cur // never blocks: room for every buffer
	if s.ih != nil {
		s.toHash <- s.cur
	}
	s.inFly++
	s.cur = staged{}
}

// wait takes one written buffer back and accounts for the pieces it
// completes.
func (s *stager) wait(ctx context.Context, done func(piece) error) error {
	var b staged
	select {
	case b = <-s.back:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	s.inFly--
	s.spare = append(s.spare, b.buf)
	if b.err != nil {
		return ota.Wrap(ota.CodeWriteFailed, fmt.Errorf("write at offset %d of %s: %w", b.base+int64(b.from), s.d.path, b.err))
	}
	s.written = max(s.written, b.end())
	return s.account(done)
}

// poll takes back the buffers already written, without waiting.
func (s *stager) poll(ctx context.Context, done func(piece) error) error {
	for s.inFly > 0 && len(s.back) > 0 {
		if err := s.wait(ctx, done); err != nil {
			return err
		}
	}
	return nil
}

// account hands done every pending piece whose bytes are all written.
func (s *stager) account(done func(piece) error) error {
	k := 0
	for ; k < len(s.pending); k++ {
		p := s.pending[k]
		if p.off+int64(len(p.buf)) > s.written {
			break
		}
		if err := done(p); err != nil {
			return err
		}
	}
	s.pending = append(s.pending[:0], s.pending[k:]...)
	return nil
}

// drain writes what is staged, the run's partial last block included, and
// waits for every write: every piece added is then accounted for.
func (s *stager) drain(ctx context.Context, done func(piece) error) error {
	if s.cur.buf != nil {
		if s.cur.to > s.cur.from {
			s.hand(true)
		} else {
			s.spare = append(s.spare, s.cur.buf)
			s.cur = staged{}
		}
	}
	for s.inFly > 0 {
		if err := s.wait(ctx, done); err != nil {
			return err
		}
	}
	return nil
}

// close ends the writing goroutine once every buffer is back (after drain,
// or after a failure).
func (s *stager) close() {
	close(s.full)
	if s.ih != nil {
		close(s.toHash)
	}
	for ; s.inFly > 0; s.inFly-- {
		<-s.back
	}
}
