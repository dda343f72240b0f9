package slots

import (
	"context"
	"crypto/sha256"
	"fmt"
	"hash"

	"github.com/otad/otad/ota"
	"github.com/otad/otad/payload"
)

// imageHash hashes the image in order as it is written, when the slot is
// not read back (slots.readback = false): every chunk matched the index, but
// only payload.sha256 binds the image the journal and the kept index name to
// the one in the slot, so it is checked in every mode.
type imageHash struct {
	in  *chunkInstall
	h   hash.Hash
	buf []byte // for what the slot already holds: one chunk, aligned
}

// newImageHash starts with what the slot holds before chunk next (a
// resumed install's chunks, written before the restart), read from it.
func (in *chunkInstall) newImageHash(next int, buf []byte) (*imageHash, error) {
	ih := &imageHash{in: in, h: sha256.New(), buf: buf}
	for i := range next {
		if err := ih.held(in.x.Chunk(i)); err != nil {
			return nil, err
		}
	}
	return ih, nil
}

// feed hashes the piece about to be written, or the chunk the slot holds.
func (ih *imageHash) feed(p piece) error {
	if p.buf != nil {
		ih.h.Write(p.buf)
		return nil
	}
	return ih.held(ih.in.x.Chunk(p.chunk))
}

// held hashes chunk c as the slot holds it, in reads of one chunk buffer (a
// zero run may be longer).
func (ih *imageHash) held(c payload.Chunk) error {
	step := int(ih.in.x.MaxChunk())
	for off := int64(0); off < int64(c.Length); off += int64(step) {
		b, err := ih.in.tgt.read(c.Offset+off, int(min(int64(step), int64(c.Length)-off)), ih.buf)
		if err != nil {
			return ota.Wrap(ota.CodeWriteFailed, err)
		}
		ih.h.Write(b)
	}
	return nil
}

// check compares the whole with payload.sha256.
func (ih *imageHash) check() error {
	if sum := ih.h.Sum(nil); [sha256.Size]byte(sum) != [sha256.Size]byte(ih.in.expected) {
		return ota.Wrap(ota.CodeHashMismatch, fmt.Errorf("slot %s: the image written has sha256 %x, the manifest says %x", ih.in.job.targetName(), sum, ih.in.expected))
	}
	return nil
}

// startImageHash starts the image's hash (read-back off) with what the slot
// holds before a resumed install's checkpoint.
func (in *chunkInstall) startImageHash(scratch []byte) (*imageHash, error) {
	next := 0
	if r := in.resumed; r != nil {
		next = r.Next
	}
	ih, err := in.newImageHash(next, scratch)
	if err != nil {
		return nil, err
	}
	in.written = ih
	return ih, nil
}

// hashPieces hashes the image from the pieces on their way to the writer,
// in order: the stage a slot written through the page cache has (one
// written with O_DIRECT hashes its staging buffers instead, as they are
// written: chunkstage.go).
func (in *chunkInstall) hashPieces(ctx context.Context, pieces <-chan piece, out chan<- piece, ih *imageHash) error {
	for p := range pieces {
		if err := ih.feed(p); err != nil {
			p.release()
			return err
		}
		select {
		case out <- p:
		case <-ctx.Done():
			p.release()
			return context.Cause(ctx)
		}
	}
	return nil
}
