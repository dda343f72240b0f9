package slots

import (
	"context"
	"crypto/sha256"
	"fmt"

	"github.com/otad/otad/payload"
)

// sendZeros hands on zero chunk c in pieces of the shared zeros: a zero run may be
// longer than any buffer.
func sendZeros(ctx context.Context, c payload.Chunk, zeros []byte, out chan<- piece) error {
	for done := 0; done < c.Length; {
		n := min(c.Length-done, len(zeros))
		p := piece{chunk: c.Num, off: c.Offset + int64(done), buf: zeros[:n], write: true, more: done+n < c.Length}
		select {
		case out <- p:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		done += n
	}
	return nil
}

// fromDelta rebuilds chunk c from its delta (p, from a lane) and the booted slot's
// older image, checked against the index; a chunk that does not come out right (the
// booted slot's bytes changed since that image was written) is fetched whole.
func (in *chunkInstall) fromDelta(ctx context.Context, net *network, p piece, c payload.Chunk, local chan []byte) (piece, error) {
	dc, _ := in.delta.Find(c.Num)
	b, derr := in.dd.Decode(dc, p.buf, in.booted)
	p.release()
	var buf []byte
	select {
	case buf = <-local:
	case <-ctx.Done():
		return piece{}, context.Cause(ctx)
	}
	if derr == nil {
		out := buf[:len(b)]
		copy(out, b)
		return piece{chunk: c.Num, buf: out, back: buf, write: true, rebuilt: true, pool: local}, nil
	}
	b, err := in.fetchMissing(ctx, net, c, buf)
	if err != nil {
		local <- buf
		return piece{}, err
	}
	return piece{chunk: c.Num, buf: b, write: true, pool: local}, nil
}

// fromSlot reads a chunk from the target (written before a restart) or the
// booted slot and checks it; a slot that does not hold it after all (a
// booted slot mounted writable) leaves it to the network.
func (in *chunkInstall) fromSlot(ctx context.Context, net *network, st payload.Step, c payload.Chunk, local chan []byte) (piece, error) {
	var buf []byte
	select {
	case buf = <-local:
	case <-ctx.Done():
		return piece{}, context.Cause(ctx)
	}
	var b []byte
	var err error
	if st.Source == payload.FromTarget {
		if c.Kind == payload.KindZero {
			// Held, as targetHeld found: a zero run is not read again.
			local <- buf
			return piece{chunk: c.Num, buf: nil, reused: true}, nil
		}
		b, err = in.tgt.read(c.Offset, c.Length, buf)
	} else {
		b, err = readBooted(in.booted, st.BootedOffset, c.Length, buf)
	}
	if err == nil && sha256.Sum256(b) == c.SHA256 {
		return piece{chunk: c.Num, buf: b, back: buf, write: st.Source != payload.FromTarget, reused: true, pool: local}, nil
	}
	b, err = in.fetchMissing(ctx, net, c, buf)
	if err != nil {
		local <- buf
		return piece{}, err
	}
	return piece{chunk: c.Num, buf: b, write: true, pool: local}, nil
}

func readBooted(f bootedSlot, off int64, n int, buf []byte) ([]byte, error) {
	if _, err := f.ReadAt(buf[:n], off); err != nil {
		return nil, fmt.Errorf("read booted slot %s at offset %d: %w", f.Name(), off, err)
	}
	return buf[:n], nil
}
