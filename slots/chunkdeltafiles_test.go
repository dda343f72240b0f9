package slots

import (
	"bytes"
	"testing"

	"github.com/otad/otad/internal/testkit/imagetest"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/payload"
)

// fileRelease is a release of m.New with file-aware deltas against m.Old, and the
// first delta record that reads only the moved file's old bytes.
func fileRelease(t *testing.T, m imagetest.Moved) (*release, payload.DeltaChunk) {
	t.Helper()
	// The moved file is the one stretch of random bytes the older image lacks:
	// its chunks' deltas are the few with a dictionary of one range.
	return filesRelease(t, m.Old, m.New, func(r *release, dc payload.DeltaChunk) bool {
		return dc.N == 1 && r.x.Chunk(dc.Chunk).Length > 8<<10 && dc.Length*20 < r.x.Chunk(dc.Chunk).StoreLength
	})
}

// filesRelease is a release of newImg with file-aware deltas against oldImg, and
// the first delta record pick takes.
func filesRelease(t *testing.T, oldImg, newImg []byte, pick func(*release, payload.DeltaChunk) bool) (*release, payload.DeltaChunk) {
	t.Helper()
	maps := [2]*payload.FileMap{}
	for k, img := range [][]byte{oldImg, newImg} {
		fm, err := payload.ReadFileMap(bytes.NewReader(img), int64(len(img)))
		if err != nil || fm == nil {
			t.Fatalf("file map: %v", err)
		}
		maps[k] = fm
	}
	r := makeRelease(t, oldImg, newImg, payload.WithFiles(maps[0], maps[1]))
	if r.d.Version != 2 {
		t.Fatalf("delta index version %d", r.d.Version)
	}
	// Copies (of chunks the older image holds elsewhere: placed.go) are
	// never what a test looks for.
	for k := range r.d.Count() {
		dc := r.d.At(k)
		if _, isCopy := dc.Copy(r.x.Chunk(dc.Chunk)); !isCopy && pick(r, dc) {
			return r, dc
		}
	}
	t.Fatal("no delta record as wanted")
	return nil, payload.DeltaChunk{}
}

// TestFileDeltaInstall: a device whose booted slot holds the older image rebuilds the
// moved and changed file from its own old bytes, read where the delta index says, and
// fetches a small part of what it fetches by chunk reuse (the same device offered
// deltas for another image only); a device whose booted slot holds an image the
// signer did not know (the older one, changed) installs by chunk reuse, without
// fetching the delta file.
func TestFileDeltaInstall(t *testing.T) {
	m := imagetest.MovedPair(t, 5, 48<<20)
	r, _ := fileRelease(t, m)
	other := *r
	other.entry.From = sha([]byte("an image no device holds"))
	unknown := bytes.Clone(m.Old)
	for o := 0; o < len(unknown); o += 1 << 20 {
		unknown[o+4096*3+17] ^= 1
	}
	var fetched [3]int64
	for k, tc := range []struct {
		rel    *release
		booted []byte
		path   ota.TransferPath
	}{
		{r, m.Old, ota.PathDelta},
		{&other, m.Old, ota.PathChunked},
		{r, unknown, ota.PathChunked},
	} {
		d := newChunkSlots(t, len(m.New)+8192, tc.booted)
		s, j := tc.rel.serve(t, d, "")
		p := installDelta(t, j)
		if !bytes.Equal(readFile(t, d.target)[:len(m.New)], m.New) {
			t.Fatal("the slot does not hold the image")
		}
		if p.Path != tc.path || (k == 0) != (p.BytesDelta > 0) || p.BytesReused == 0 || p.BytesFetched != s.total() ||
			(k > 0) != (s.sent["/rel.delta"].Load() == 0) {
			t.Fatalf("case %d: progress %+v, served %d, of the delta file %d", k, p, s.total(), s.sent["/rel.delta"].Load())
		}
		fetched[k] = p.BytesFetched
	}
	t.Logf("fetched %d bytes with file-aware deltas, %d by chunk reuse, %d from an image the signer did not know", fetched[0], fetched[1], fetched[2])
	if fetched[0]*3 > fetched[1] {
		t.Errorf("fetched %d bytes with deltas, %d by chunk reuse", fetched[0], fetched[1])
	}
}

// TestFileDeltaCorrupt: a file-aware delta that is corrupt, or whose old extent in the
// booted slot was altered, makes another chunk: refused by its hash before a byte of
// it is written, the chunk fetched whole from the store; the install succeeds.
func TestFileDeltaCorrupt(t *testing.T) {
	m := imagetest.MovedPair(t, 5, 48<<20)
	r, dc := fileRelease(t, m)
	corruptDeltas(t, r, dc)
}

// corruptDeltas installs r with dc's delta corrupt, and with the old bytes it
// reads altered in the booted slot: each time the slot holds the image, and
// dc's chunk came whole from the store.
func corruptDeltas(t *testing.T, r *release, dc payload.DeltaChunk) {
	c := r.x.Chunk(dc.Chunk)
	clean := func() (ota.Transfer, int64) {
		d := newChunkSlots(t, len(r.img)+8192, r.oldImg)
		s, j := r.serve(t, d, sha(r.oldImg))
		return installDelta(t, j), s.sent["/rel.store"].Load()
	}
	base, baseStore := clean()
	for _, tc := range []struct {
		name   string
		booted func() []byte
		delta  func() []byte
	}{
		{"the delta corrupt", func() []byte { return r.oldImg }, func() []byte {
			b := bytes.Clone(r.delta)
			b[dc.Offset+int64(dc.Length)/2] ^= 0x40
			return b
		}},
		{"the old extent altered", func() []byte {
			b := bytes.Clone(r.oldImg)
			for _, rg := range dc.Ranges {
				for o := rg.Off + 100; o < rg.Off+rg.Len; o += 700 {
					b[o] ^= 0x11
				}
			}
			return b
		}, func() []byte { return r.delta }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rr := *r
			rr.delta = tc.delta()
			d := newChunkSlots(t, len(r.img)+8192, tc.booted())
			s, j := rr.serve(t, d, sha(r.oldImg))
			p := installDelta(t, j)
			if !bytes.Equal(readFile(t, d.target)[:len(r.img)], r.img) {
				t.Fatal("the slot does not hold the image")
			}
			store := s.sent["/rel.store"].Load()
			if store < baseStore+int64(c.StoreLength) || p.BytesDelta > base.BytesDelta-int64(c.Length) {
				t.Fatalf("progress %+v (clean: %+v); the store sent %d bytes (clean: %d), chunk %d is %d stored",
					p, base, store, baseStore, dc.Chunk, c.StoreLength)
			}
		})
	}
}

// TestBinaryDiffInstall: a device whose booted slot holds the older image rebuilds
// the chunks of a rebuilt executable from binary diffs against its old file,
// fetching a small part of what it fetches by chunk reuse; a corrupt binary diff,
// or the old file's bytes altered in the booted slot, is caught before the write
// and its chunk fetched whole.
func TestBinaryDiffInstall(t *testing.T) {
	m := imagetest.RebuiltPair(t, 3, 48<<20)
	r, dc := filesRelease(t, m.Old, m.New, func(r *release, dc payload.DeltaChunk) bool {
		return dc.Method == 1 && dc.Length*8 < r.x.Chunk(dc.Chunk).StoreLength
	})
	var fetched [2]int64
	for k, path := range []ota.TransferPath{ota.PathDelta, ota.PathChunked} {
		rel := r
		if k == 1 {
			other := *r
			other.entry.From = sha([]byte("an image no device holds"))
			rel = &other
		}
		d := newChunkSlots(t, len(m.New)+8192, m.Old)
		_, j := rel.serve(t, d, "")
		p := installDelta(t, j)
		if !bytes.Equal(readFile(t, d.target)[:len(m.New)], m.New) || p.Path != path {
			t.Fatalf("case %d: path %s, the slot holds the image: %v", k, p.Path, bytes.Equal(readFile(t, d.target)[:len(m.New)], m.New))
		}
		fetched[k] = p.BytesFetched
	}
	t.Logf("fetched %d bytes with binary diffs, %d by chunk reuse", fetched[0], fetched[1])
	if fetched[0]*3 > fetched[1] {
		t.Errorf("fetched %d bytes with binary diffs, %d by chunk reuse", fetched[0], fetched[1])
	}
	corruptDeltas(t, r, dc)
}
