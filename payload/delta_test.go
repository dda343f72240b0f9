package payload

import (
	"bytes"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/otad/otad/ota"
)

// edited is files with an update's kind of changes, from seed: some files with a few
// bytes changed, some with bytes inserted (a longer version), one replaced.
func edited(files []fsFile, seed uint64) []fsFile {
	rng := rand.New(rand.NewPCG(seed, 11))
	out := make([]fsFile, len(files))
	for i, f := range files {
		b := bytes.Clone(f.data)
		switch i % 7 {
		case 1:
			for range 3 {
				b[rng.IntN(len(b))] ^= 0x5a
			}
		case 3:
			at := rng.IntN(len(b))
			b = append(b[:at:at], append(bytes.Repeat([]byte("inserted "), 40), b[at:]...)...)
		case 5:
			if i == 5 {
				b = make([]byte, len(b))
				for j := range b {
					b[j] = byte(rng.Uint32())
				}
			}
		}
		out[i].data = b
	}
	return out
}

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
	files := makeFiles(80, 3)
	root := t.TempDir()
	writeTree(t, filepath.Join(root, "old"), files, nil)
	writeTree(t, filepath.Join(root, "new"), edited(files, 1), []byte("a small new file\n"))
	oldImg := mkfsExt4(t, filepath.Join(root, "old"), 96<<20)
	newImg := mkfsExt4(t, filepath.Join(root, "new"), 96<<20)
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
