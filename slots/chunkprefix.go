package slots

import (
	"context"
	"crypto/sha256"
	"fmt"

	"github.com/otad/otad/ota"
	"github.com/otad/otad/payload"
)

// A zstd-prefix store (docs/contract/chunked.md) decodes each zstd chunk with the
// image's bytes before it. The lanes fetch such chunks as they are stored; the
// assembler, which takes every chunk in image order, keeps the image's last bytes
// (in.hist) and decodes them there, checked against the index before they are
// handed on to be written.

// packed reports whether chunk c arrives from the store still compressed, to be
// decoded by the assembler with the bytes before it.
func (in *chunkInstall) packed(c payload.Chunk) bool {
	return in.pd != nil && c.Kind == payload.KindZstd
}

// remember adds chunk c, as p holds it, to the image's last bytes when they
// are a later zstd chunk's dictionary, and forgets them when not: a run of raw
// chunks longer than the prefix (a compressed file system's data) is not
// copied there. Every zstd chunk counts, whatever its source, since any may
// have to be fetched from the store (a delta or a booted chunk that does not
// come out right). The next bytes remembered after a gap start the run again,
// and reach back at least a prefix before the next zstd chunk: the chunk before
// them ended before its dictionary began.
func (in *chunkInstall) remember(p piece, c payload.Chunk) {
	switch {
	case in.hist == nil:
	case !in.beforeZstd(c):
		in.hist.Reset()
	case p.buf == nil || c.Kind == payload.KindZero:
		in.hist.AddZeros(int64(c.Length))
	default:
		in.hist.Add(p.buf)
	}
}

// beforeZstd reports whether chunk c holds bytes of a later zstd chunk's
// dictionary (chunks come in image order).
func (in *chunkInstall) beforeZstd(c payload.Chunk) bool {
	for in.nextZstd < in.x.Count() && (in.nextZstd <= c.Num || in.x.Chunk(in.nextZstd).Kind != payload.KindZstd) {
		in.nextZstd++
	}
	return in.nextZstd < in.x.Count() && in.x.Chunk(in.nextZstd).Offset-payload.PrefixSize(in.x) < c.Offset+int64(c.Length)
}

// unpack decodes p, chunk c as stored, into p's buffer: a chunk that does not
// decode to its hash (a corrupt frame) is fetched once more, then fails.
func (in *chunkInstall) unpack(ctx context.Context, net *network, p piece, c payload.Chunk) (piece, error) {
	full := p.buf[:cap(p.buf)]
	b, err := in.unpackOr(ctx, net, c, p.buf, full)
	if err != nil {
		p.release()
		return piece{}, err
	}
	if p.back == nil {
		p.back = full
	}
	p.buf = b
	return p, nil
}

// fetchMissing is network.fetchMissing, the chunk decoded when it arrives packed.
func (in *chunkInstall) fetchMissing(ctx context.Context, net *network, c payload.Chunk, buf []byte) ([]byte, error) {
	b, err := net.fetchMissing(ctx, c, buf)
	if err != nil || !in.packed(c) {
		return b, err
	}
	return in.unpackOr(ctx, net, c, b, buf)
}

// unpackOr decodes stored into buf (which it may share); when the chunk does not
// come out right, it is fetched once more and that is final.
func (in *chunkInstall) unpackOr(ctx context.Context, net *network, c payload.Chunk, stored, buf []byte) ([]byte, error) {
	b, err := in.decodePacked(c, stored, buf)
	if ota.CodeOf(err) != ota.CodeChunkMismatch {
		return b, err
	}
	in.log.Warn("chunk did not decode to its hash: fetched once more", "chunk", c.Num, "err", err)
	if stored, err = net.fetchMissing(ctx, c, buf); err != nil {
		return nil, err
	}
	return in.decodePacked(c, stored, buf)
}

func (in *chunkInstall) decodePacked(c payload.Chunk, stored, buf []byte) ([]byte, error) {
	out, err := in.pd.Decode(c.Num, stored, in.hist.Bytes())
	if err != nil {
		return nil, err
	}
	return buf[:copy(buf[:c.Length], out)], nil
}

// planPrefix readies a zstd-prefix install: its decoder, and the image's bytes
// before the plan's first chunk. A target that does not hold them after all
// (changed since the checkpoint) makes the install start over: the chunks
// after them decode only with them.
func (in *chunkInstall) planPrefix(pi payload.PlanInput, scratch []byte) error {
	if !in.x.Prefixed() {
		return nil
	}
	var err error
	if in.pd, err = payload.NewPrefixDecoder(in.x); err != nil {
		return ota.Wrap(ota.CodeWriteFailed, err)
	}
	in.hist = payload.NewHistory(payload.PrefixSize(in.x))
	if len(in.plan.Steps) == 0 {
		return nil
	}
	err = in.primeHistory(in.plan.Steps[0].Chunk, scratch)
	if ota.CodeOf(err) != ota.CodeChunkMismatch {
		return err
	}
	in.log.Warn("the target does not hold what the checkpoint says was written: the install starts over", "err", err)
	in.resumed, pi.Next, pi.TargetHas = nil, 0, nil
	in.hist.Reset()
	if in.plan, err = payload.MakePlan(in.x, pi); err != nil {
		return ota.Wrap(ota.CodeWriteFailed, err)
	}
	return nil
}

// primeHistory fills the image's last bytes before chunk next, where this run
// starts, from the target (written before a restart), each chunk checked against
// the index: a chunk the target does not hold is a chunk_mismatch naming it.
func (in *chunkInstall) primeHistory(next int, buf []byte) error {
	if in.hist == nil || next == 0 {
		return nil
	}
	start := in.x.Chunk(next).Offset
	from := start - payload.PrefixSize(in.x)
	first := next
	for first > 0 && in.x.Chunk(first-1).Offset+int64(in.x.Chunk(first-1).Length) > from {
		first--
	}
	in.hist.Reset()
	for i := first; i < next; i++ {
		c := in.x.Chunk(i)
		skip := max(0, from-c.Offset)
		if c.Kind == payload.KindZero {
			in.hist.AddZeros(int64(c.Length) - skip)
			continue
		}
		b, err := in.tgt.read(c.Offset, c.Length, buf)
		if err != nil {
			return ota.Wrap(ota.CodeWriteFailed, fmt.Errorf("read %s at offset %d: %w", in.job.targetName(), c.Offset, err))
		}
		if sha256.Sum256(b) != c.SHA256 {
			return ota.FieldErrorf(ota.CodeChunkMismatch, fmt.Sprintf("target.chunk[%d]", i), "the target does not hold the chunk its checkpoint says was written: the chunks after it decode with its bytes")
		}
		in.hist.Add(b[skip:])
	}
	return nil
}
