// Package sha256pair hashes the same bytes into two SHA-256 digests in one
// pass: a chunked install checks each chunk against the index and, with
// read-back off, hashes the whole image as well (docs/contract/chunked.md),
// two SHA-256s of every byte. With the x86 SHA extensions one message's
// rounds wait on each other; two messages interleaved fill those waits, so
// the pair costs little more than one (docs/design.md, "Writing a slot").
// Elsewhere Both is two passes of crypto/sha256.
package sha256pair

import (
	"crypto/sha256"
	"encoding/binary"
)

// Size is a digest's size in bytes.
const Size = sha256.Size

const blockSize = 64

var initial = [8]uint32{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19}

// Digest is a SHA-256 under way. It is a value: a copy is a snapshot of the
// hash so far (a chunk found wrong is taken out of the image's hash by
// going back to the copy made before it). The zero Digest is not ready:
// start with New.
type Digest struct {
	h   [8]uint32
	x   [blockSize]byte // a partial block
	nx  int
	len uint64
}

// New returns the digest of nothing.
func New() Digest { return Digest{h: initial} }

// Fast reports whether Both hashes its two digests in one pass here.
func Fast() bool { return hasSHA }

// Write hashes p.
func (d *Digest) Write(p []byte) {
	d.len += uint64(len(p))
	if d.nx > 0 {
		n := copy(d.x[d.nx:], p)
		d.nx += n
		p = p[n:]
		if d.nx < blockSize {
			return
		}
		blocks(&d.h, d.x[:])
		d.nx = 0
	}
	if n := len(p) &^ (blockSize - 1); n > 0 {
		blocks(&d.h, p[:n])
		p = p[n:]
	}
	d.nx = copy(d.x[:], p)
}

// Sum is the digest of what was written; d goes on unchanged.
func (d Digest) Sum() [Size]byte {
	n := d.len
	var pad [blockSize + 8]byte
	pad[0] = 0x80
	k := (55 - n) % 64 // zeros after the 0x80 so that the length ends a block
	binary.BigEndian.PutUint64(pad[1+k:], n<<3)
	d.Write(pad[:1+k+8])
	var sum [Size]byte
	for i, v := range d.h {
		binary.BigEndian.PutUint32(sum[4*i:], v)
	}
	return sum
}

// Both hashes p into a and b: in one pass where Fast, else one after the
// other.
func Both(a, b *Digest, p []byte) {
	if !hasSHA {
		a.Write(p)
		b.Write(p)
		return
	}
	a.len += uint64(len(p))
	b.len += uint64(len(p))
	pa, pb := fill(a, p), fill(b, p)
	// Each now takes whole blocks of its rest of p, from where its partial
	// block ended: together, as many as both have.
	if n := min(len(pa), len(pb)) / blockSize; n > 0 {
		block2(&a.h, &b.h, &pa[0], &pb[0], n)
		pa, pb = pa[n*blockSize:], pb[n*blockSize:]
	}
	rest(a, pa)
	rest(b, pb)
}

// fill completes d's partial block from p and returns what p has left.
func fill(d *Digest, p []byte) []byte {
	if d.nx == 0 {
		return p
	}
	n := copy(d.x[d.nx:], p)
	d.nx += n
	if d.nx == blockSize {
		blocks(&d.h, d.x[:])
		d.nx = 0
	}
	return p[n:]
}

// rest hashes p's whole blocks into d and keeps the remainder.
func rest(d *Digest, p []byte) {
	if n := len(p) &^ (blockSize - 1); n > 0 {
		blocks(&d.h, p[:n])
		p = p[n:]
	}
	d.nx += copy(d.x[d.nx:], p)
}
