package slots

import (
	"bytes"
	"sync/atomic"
	"testing"

	"github.com/otad/otad/internal/testkit/imagetest"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/payload"
)

// countedSlot counts the bytes an install reads of the booted slot.
type countedSlot struct {
	bootedSlot
	n *atomic.Int64
}

func (c countedSlot) ReadAt(b []byte, off int64) (int, error) {
	n, err := c.bootedSlot.ReadAt(b, off)
	c.n.Add(int64(n))
	return n, err
}

// installCounted installs j and returns its progress and the bytes it read of the
// booted slot.
func installCounted(t *testing.T, j ChunkedJob) (ota.Transfer, int64) {
	t.Helper()
	var read atomic.Int64
	var last ota.Progress
	j.Progress = func(p ota.Progress) { last = p }
	ct := defaultChunkTuning()
	ct.wrapBooted = func(s bootedSlot) bootedSlot { return countedSlot{s, &read} }
	if err := writeChunked(t.Context(), j, defaultTuning(), ct); err != nil {
		t.Fatal(err)
	}
	return last.Transfer, read.Load()
}

// TestPlacedDeltaReadsOnlyWhatItNeeds: a device whose journal names the older image
// of a placed deltas entry, with no kept index of it (its last install was a stream,
// or its kept files were lost), reads of its booted slot only the chunks it reuses
// (where the delta index's copy records say, or at their own offsets) and its
// deltas' dictionaries: no scan of the slot, so beyond what it copies it reads in
// proportion to the change; and it fetches no more than the scan's install. The
// same entry without placed scans the slot once (reads more than the slot), and a
// slot that is not what the journal says installs all the same, its chunks fetched.
func TestPlacedDeltaReadsOnlyWhatItNeeds(t *testing.T) {
	for name, mk := range map[string]func(t *testing.T) *release{
		"ext4 update, version 1": func(t *testing.T) *release { o, n := update(t); return makeRelease(t, o, n) },
		"moved file, version 2":  func(t *testing.T) *release { r, _ := fileRelease(t, imagetest.MovedPair(t, 5, 48<<20)); return r },
	} {
		t.Run(name, func(t *testing.T) {
			r := mk(t)
			if !r.entry.Placed {
				t.Fatal("the signer's entry is not placed")
			}
			slot := len(r.img) + 8192
			var dicts, copies int64
			for k := range r.d.Count() {
				dc := r.d.At(k)
				if _, ok := dc.Copy(r.x.Chunk(dc.Chunk)); ok {
					copies++
				} else {
					dicts += dc.DictLen()
				}
			}
			install := func(booted []byte, placed bool) (ota.Transfer, int64, *fileServer) {
				rr := *r
				rr.entry.Placed = placed
				d := newChunkSlots(t, slot, booted)
				s, j := rr.serve(t, d, sha(r.oldImg))
				p, read := installCounted(t, j)
				if !bytes.Equal(readFile(t, d.target)[:len(r.img)], r.img) {
					t.Fatal("the slot does not hold the image")
				}
				return p, read, s
			}
			p, read, _ := install(r.oldImg, true)
			scan, scanRead, _ := install(r.oldImg, false)
			whole := p.BytesFetched - r.entry.IndexSize - int64(len(r.idx)) // deltas and chunks fetched whole
			t.Logf("placed: read %d bytes of a %d-byte slot (reused %d, dictionaries %d, %d copy records), fetched %d; scan: read %d, fetched %d",
				read, slot, p.BytesReused, dicts, copies, p.BytesFetched, scanRead, scan.BytesFetched)
			if p.Path != ota.PathDelta || p.BytesReused == 0 || copies == 0 {
				t.Fatalf("placed: progress %+v, %d copy records", p, copies)
			}
			// What it copies, the dictionaries, and at most a chunk's worth of
			// misses for every byte it fetched whole.
			if read > p.BytesReused+dicts+whole*int64(2*r.x.ChunkSize())/256 {
				t.Errorf("placed: read %d bytes; reused %d, dictionaries %d", read, p.BytesReused, dicts)
			}
			if p.BytesFetched > scan.BytesFetched+4096 || p.BytesReused < scan.BytesReused {
				t.Errorf("placed: fetched %d, reused %d; the scan's install %d, %d", p.BytesFetched, p.BytesReused, scan.BytesFetched, scan.BytesReused)
			}
			if scanRead < int64(slot)+scan.BytesReused {
				t.Errorf("scan: read %d bytes of a %d-byte slot, reused %d", scanRead, slot, scan.BytesReused)
			}
			// The journal's word is wrong: every chunk still checked.
			other := imagetest.Ext4(t, imagetest.Tree(t, imagetest.Files(30, 3), nil), int64(len(r.oldImg)))
			q, _, s := install(other, true)
			if q.BytesFetched != s.total() || q.BytesDelta != 0 && q.BytesDelta > p.BytesDelta {
				t.Fatalf("another image: progress %+v, served %d", q, s.total())
			}
		})
	}
}

// TestPlacedChunksFromIndex: the booted slot's chunk list a placed delta index
// makes: a copy record's range, the same offset for a chunk no record names
// (inside the older image), nothing for a delta that is not a copy or a zero chunk.
func TestPlacedChunksFromIndex(t *testing.T) {
	o, n := update(t)
	r := makeRelease(t, o, n)
	h := placedChunks(r.x, r.d, int64(len(o)))
	for i := range r.x.Count() {
		c := r.x.Chunk(i)
		at, found := h.Find(c.SHA256)
		dc, rec := r.d.Find(i)
		copyAt, isCopy := dc.Copy(c)
		switch {
		case c.Kind == payload.KindZero:
		case rec && isCopy:
			if !found || !bytes.Equal(o[at:at+int64(c.Length)], n[c.Offset:c.Offset+int64(c.Length)]) || at != copyAt && !bytes.Equal(o[copyAt:copyAt+int64(c.Length)], o[at:at+int64(c.Length)]) {
				t.Fatalf("chunk %d: copy record at %d, listed %v at %d", i, copyAt, found, at)
			}
		case rec:
			if found && at == c.Offset && !bytes.Equal(o[at:at+int64(c.Length)], n[c.Offset:c.Offset+int64(c.Length)]) {
				t.Fatalf("chunk %d: a delta listed at its own offset", i)
			}
		default:
			if !found {
				t.Fatalf("chunk %d: no record, not listed", i)
			}
		}
	}
}
