package payload

import (
	"bytes"
	"testing"

	"github.com/otad/otad/internal/testkit/imagetest"
	"github.com/otad/otad/ota"
)

type deltaPair struct {
	oldImg, newImg []byte
	new            built
	x              *Index
	res            *DeltaResult
	deltas         []byte
}

func makeDeltaPair(t testing.TB, oldImg, newImg []byte, opts Options) deltaPair {
	t.Helper()
	p := deltaPair{oldImg: oldImg, newImg: newImg, new: build(t, newImg, opts)}
	p.x = p.new.parse(t)
	var deltas bytes.Buffer
	res, err := BuildDelta(t.Context(), bytes.NewReader(oldImg), int64(len(oldImg)), bytes.NewReader(newImg), p.x, &deltas)
	if err != nil {
		t.Fatal(err)
	}
	p.res, p.deltas = res, deltas.Bytes()
	return p
}

func (p deltaPair) parse(t testing.TB) *Delta {
	t.Helper()
	d, err := ParseDelta(p.res.Index, p.res.Expect(), p.x, "delta")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// frame is delta record k's frame.
func (p deltaPair) frame(dc DeltaChunk) []byte {
	off := dc.Offset - int64(len(p.res.Index))
	return p.deltas[off : off+int64(dc.Length)]
}

// TestDeltaRebuildsChunks: on an update of an ext4 image, every chunk the older image
// does not hold is rebuilt from a delta much smaller than the chunk, or fetched whole;
// a device holding the older image fetches a fraction of the store.
func TestDeltaRebuildsChunks(t *testing.T) {
	files := imagetest.Files(60, 3)
	oldImg := imagetest.Ext4(t, imagetest.Tree(t, files, nil), 64<<20)
	newImg := imagetest.Ext4(t, imagetest.Tree(t, imagetest.Updated(files, 1), []byte("a small new file\n")), 64<<20)
	p := makeDeltaPair(t, oldImg, newImg, Options{Chunking: ota.ChunkingCDC})
	d := p.parse(t)
	dec, err := NewDeltaDecoder(p.x)
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	for k := range d.Count() {
		dc := d.At(k)
		c := p.x.Chunk(dc.Chunk)
		got, err := dec.Decode(dc, p.frame(dc), bytes.NewReader(oldImg))
		if err != nil {
			t.Fatalf("delta %d: %v", k, err)
		}
		if !bytes.Equal(got, newImg[c.Offset:c.Offset+int64(c.Length)]) {
			t.Fatalf("delta %d: not the chunk", k)
		}
	}
	t.Logf("image %d, store %d, index %d; held %d, rebuilt %d from %d deltas (%d bytes, index %d), fetched whole %d (%d stored): fetch %d",
		len(newImg), p.new.res.StoreSize, len(p.new.res.Index), p.res.Held, p.res.Rebuilt, p.res.Count, p.res.DeltasSize, len(p.res.Index), p.res.Full, p.res.FullStored, p.res.Fetch(p.x))
}
