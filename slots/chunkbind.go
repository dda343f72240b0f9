package slots

import (
	"context"
	"crypto/sha256"
	"fmt"
	"hash"

	"github.com/otad/otad/ota"
	"github.com/otad/otad/payload"
	"github.com/otad/otad/sha256pair"
)

// imageHash hashes the image in order as it is written, when the slot is
// not read back (slots.readback = false): every chunk matched the index, but
// only payload.sha256 binds the image the journal and the kept index name to
// the one in the slot, so it is checked in every mode.
//
// Where two SHA-256s of the same bytes cost little more than one
// (sha256pair.Fast: the x86 SHA extensions), the assembler checks each raw
// chunk from the network and hashes it into the image in one pass (pair),
// instead of a lane checking it and a stage after the writer hashing it
// again (docs/design.md, "Writing a slot").
type imageHash struct {
	in   *chunkInstall
	h    hash.Hash         // without pair
	d    sha256pair.Digest // with pair
	pair bool
	buf  []byte // for what the slot already holds: one chunk, aligned
}

// newImageHash starts with what the slot holds before chunk next (a
// resumed install's chunks, written before the restart), read from it.
func (in *chunkInstall) newImageHash(next int, buf []byte) (*imageHash, error) {
	ih := &imageHash{in: in, buf: buf, pair: in.ct.pairHash}
	if ih.pair {
		ih.d = sha256pair.New()
	} else {
		ih.h = sha256.New()
	}
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
		ih.write(p.buf)
		return nil
	}
	return ih.held(ih.in.x.Chunk(p.chunk))
}

func (ih *imageHash) write(b []byte) {
	if ih.pair {
		ih.d.Write(b)
	} else {
		ih.h.Write(b)
	}
}

// checked hashes chunk c's bytes b, not yet checked against the index, into
// the image and into a hash of their own (pair only): false, and the image's
// hash as it was, when they are not the chunk the index lists.
func (ih *imageHash) checked(c payload.Chunk, b []byte) bool {
	before, chunk := ih.d, sha256pair.New()
	sha256pair.Both(&ih.d, &chunk, b)
	if len(b) != c.Length || chunk.Sum() != c.SHA256 {
		ih.d = before
		return false
	}
	return true
}

// zeros hashes a zero run of n bytes from the shared zeros.
func (ih *imageHash) zeros(n int, zeros []byte) {
	for n > 0 {
		k := min(n, len(zeros))
		ih.write(zeros[:k])
		n -= k
	}
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
		ih.write(b)
	}
	return nil
}

// check compares the whole with payload.sha256.
func (ih *imageHash) check() error {
	var sum [sha256.Size]byte
	if ih.pair {
		sum = ih.d.Sum()
	} else {
		sum = [sha256.Size]byte(ih.h.Sum(nil))
	}
	if sum != [sha256.Size]byte(ih.in.expected) {
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
