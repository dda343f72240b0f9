package payload

import (
	"bufio"
	"errors"
	"fmt"
	"io"

	"github.com/restic/chunker"
)

// cut is one piece of an image as a version 2 index cuts it: a content-defined chunk,
// or a zero run (data nil).
type cut struct {
	off  int64
	n    int64
	data []byte // valid until the next call of next
}

// cutter cuts an image into zero runs and content-defined chunks
// (docs/contract/chunked.md): zero runs of at least p.Min bytes in ZeroBlock-aligned
// blocks end a segment, and each segment between them is cut by restic/chunker on its
// own. The signer and a device scanning its booted slot cut alike, byte for byte.
type cutter struct {
	p    CDC
	seg  segReader
	ch   *chunker.Chunker
	buf  []byte
	off  int64
	zero int64 // a zero run to hand out next
	done bool
}

// newCutter cuts r; every byte read from r also goes to tee when it is not nil.
func newCutter(r io.Reader, p CDC, tee io.Writer) *cutter {
	c := &cutter{p: p, buf: make([]byte, p.Max)}
	c.seg = segReader{src: bufio.NewReaderSize(r, 1<<20), tee: tee, min: ZeroBlock, blk: make([]byte, ZeroBlock)}
	c.ch = chunker.NewWithBoundaries(&c.seg, chunker.Pol(p.Pol), uint(p.Min), uint(p.Max))
	c.ch.SetAverageBits(p.avgBits())
	return c
}

// next returns the next piece, or io.EOF after the last.
func (c *cutter) next() (cut, error) {
	for {
		if c.zero > 0 {
			n := min(c.zero, MaxZeroRun)
			c.zero -= n
			k := cut{off: c.off, n: n}
			c.off += n
			return k, nil
		}
		if c.done {
			return cut{}, io.EOF
		}
		ch, err := c.ch.Next(c.buf)
		switch {
		case errors.Is(err, io.EOF):
			if c.seg.err != nil {
				return cut{}, c.seg.err
			}
			if c.seg.run == 0 {
				c.done = true
				continue
			}
			if c.zero, err = c.seg.endRun(); err != nil {
				return cut{}, err
			}
			c.ch.ResetWithBoundaries(&c.seg, chunker.Pol(c.p.Pol), uint(c.p.Min), uint(c.p.Max))
			c.ch.SetAverageBits(c.p.avgBits())
			continue
		case err != nil:
			return cut{}, err
		}
		k := cut{off: c.off, n: int64(len(ch.Data)), data: ch.Data}
		c.off += k.n
		return k, nil
	}
}

// segReader hands the chunker one segment of the image: its bytes up to the next zero
// run of at least min bytes (ZeroBlock-aligned), then io.EOF. Zero blocks are held
// back, as a count, until it is known whether they make such a run.
type segReader struct {
	src   *bufio.Reader
	tee   io.Writer
	min   int64
	blk   []byte
	cur   []byte // the rest of a block to hand out
	held  int64  // zero bytes held back
	out   int64  // held-back zeros to hand out as data: a block that is not zero followed
	run   int64  // a zero run found: the segment has ended
	eof   bool
	err   error // a read error: final
	taken int64 // bytes read from src
}

func (s *segReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		if s.out > 0 {
			k := int(min(s.out, int64(len(p)-n)))
			clear(p[n : n+k])
			n, s.out = n+k, s.out-int64(k)
			continue
		}
		if len(s.cur) > 0 {
			k := copy(p[n:], s.cur)
			n, s.cur = n+k, s.cur[k:]
			continue
		}
		if s.run > 0 || s.eof || s.err != nil {
			break
		}
		b := s.block()
		switch {
		case b == nil:
			s.out, s.held = s.held, 0
		case AllZero(b):
			if s.held += int64(len(b)); s.held >= s.min {
				s.run, s.held = s.held, 0
			}
		default:
			s.out, s.held, s.cur = s.held, 0, b
		}
	}
	if n > 0 {
		return n, nil
	}
	if s.err != nil {
		return 0, s.err
	}
	return 0, io.EOF
}

// block reads the next block of the image (shorter at its end); nil at the end or on
// an error (s.eof, s.err).
func (s *segReader) block() []byte {
	k, err := io.ReadFull(s.src, s.blk)
	if k > 0 && s.tee != nil {
		s.tee.Write(s.blk[:k])
	}
	s.taken += int64(k)
	switch {
	case err == nil || (errors.Is(err, io.ErrUnexpectedEOF) && k > 0):
		return s.blk[:k]
	case errors.Is(err, io.EOF):
		s.eof = true
	default:
		s.err = fmt.Errorf("read image at offset %d: %w", s.taken, err)
	}
	return nil
}

// endRun reads the rest of the zero run the segment ended at and returns its length;
// the first block that is not zero begins the next segment.
func (s *segReader) endRun() (int64, error) {
	n := s.run
	s.run = 0
	for {
		b := s.block()
		if b == nil {
			return n, s.err
		}
		if !AllZero(b) {
			s.cur = b
			return n, nil
		}
		n += int64(len(b))
	}
}
