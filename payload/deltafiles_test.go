package payload

import (
	"bytes"
	"testing"

	"github.com/otad/otad/internal/testkit/imagetest"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/payload/ext4"
)

func fileMapOf(t testing.TB, img []byte) *FileMap {
	t.Helper()
	m, err := ReadFileMap(bytes.NewReader(img), int64(len(img)))
	if err != nil || m == nil {
		t.Fatalf("file map: %v", err)
	}
	return m
}

func fileOf(t testing.TB, m *FileMap, p string) ext4.File {
	t.Helper()
	i, ok := m.byPath[p]
	if !ok {
		t.Fatalf("%s not in the image", p)
	}
	return m.files[i]
}

func inside(r Range, f ext4.File) bool {
	for _, x := range f.Extents {
		if r.Off >= x.Physical && r.Off+r.Len <= x.Physical+x.Len {
			return true
		}
	}
	return false
}

// TestFileDeltaMovedFile: a file renamed into another directory and changed (a byte
// in every KiB: no chunk and no piece of it held as it was), lying elsewhere in the
// image, is rebuilt from its own old bytes: every delta of a chunk inside it reads
// only the old file's extents, and what a device fetches for it is a small part of
// what it fetches by chunk reuse, and of the deltas made without the file maps.
func TestFileDeltaMovedFile(t *testing.T) {
	m := imagetest.MovedPair(t, 5, 48<<20)
	b := build(t, m.New, Options{Chunking: ota.ChunkingCDC, Level: 3})
	x := b.parse(t)
	oldMap, newMap := fileMapOf(t, m.Old), fileMapOf(t, m.New)
	oldFile, newFile := fileOf(t, oldMap, m.OldPath), fileOf(t, newMap, m.NewPath)
	if oldFile.Extents[0].Physical == newFile.Extents[0].Physical {
		t.Fatalf("the moved file lies at %d in both images", oldFile.Extents[0].Physical)
	}
	var plainOut, filesOut bytes.Buffer
	plain, err := BuildDelta(t.Context(), bytes.NewReader(m.Old), int64(len(m.Old)), bytes.NewReader(m.New), x, &plainOut)
	if err != nil {
		t.Fatal(err)
	}
	res, err := BuildDelta(t.Context(), bytes.NewReader(m.Old), int64(len(m.Old)), bytes.NewReader(m.New), x, &filesOut, WithFiles(oldMap, newMap))
	if err != nil {
		t.Fatal(err)
	}
	d, err := ParseDelta(res.Index, res.Expect(), x, "delta")
	if err != nil {
		t.Fatal(err)
	}
	if d.Version != 2 || res.ByFile == 0 {
		t.Fatalf("version %d, %d deltas against their files", d.Version, res.ByFile)
	}
	// The chunks wholly inside the moved file: each a delta reading its old bytes.
	var stored, deltas int64
	var chunks int
	for i := range x.Count() {
		c := x.Chunk(i)
		if !inside(Range{c.Offset, int64(c.Length)}, newFile) {
			continue
		}
		chunks++
		stored += int64(c.StoreLength)
		dc, ok := d.Find(i)
		if !ok {
			t.Errorf("chunk %d of the moved file has no delta", i)
			continue
		}
		deltas += int64(dc.Length)
		for _, r := range dc.Ranges {
			if !inside(r, oldFile) {
				t.Errorf("chunk %d reads %d+%d, outside the old file's extents %+v", i, r.Off, r.Len, oldFile.Extents)
			}
		}
	}
	t.Logf("moved file: %d chunks, %d bytes stored, %d bytes of deltas; device fetches %d (plain deltas %d, chunk reuse %d)",
		chunks, stored, deltas, res.Fetch(x), plain.Fetch(x), res.FetchChunks(x))
	if chunks < 8 || deltas*20 > stored {
		t.Errorf("%d chunks of the moved file: %d bytes of deltas for %d stored", chunks, deltas, stored)
	}
	if res.Fetch(x)*3 > res.FetchChunks(x) || res.Fetch(x)*2 > plain.Fetch(x) {
		t.Errorf("a device fetches %d bytes, by chunk reuse %d, with deltas made without file maps %d", res.Fetch(x), res.FetchChunks(x), plain.Fetch(x))
	}
	// Every delta, decoded with the older image's bytes, makes its chunk.
	dec, err := NewDeltaDecoder(x)
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	frames := filesOut.Bytes()
	for k := range d.Count() {
		dc := d.At(k)
		o := dc.Offset - int64(len(res.Index))
		if _, err := dec.Decode(dc, frames[o:o+int64(dc.Length)], bytes.NewReader(m.Old)); err != nil {
			t.Fatalf("record %d: %v", k, err)
		}
	}
}
