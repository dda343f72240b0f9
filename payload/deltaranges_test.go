package payload

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/otad/otad/ota"
	"github.com/otad/otad/payload/ext4"
)

// fuzzPair2 is fuzzPair's images with file-aware deltas (a version 2 index): each
// image one file, the older's in extents of 4 KiB scattered (the k-th of n at 7k
// mod n), so that a chunk's old bytes lie in more ranges than a few.
func fuzzPair2(t testing.TB) deltaPair {
	t.Helper()
	p := fuzzPair(t)
	oldFile := ext4.File{Path: "/f", Size: int64(len(p.oldImg))}
	const ext = 4 << 10
	n := oldFile.Size / ext
	for l := int64(0); l < oldFile.Size; l += ext {
		phys := l / ext * 7 % n
		if l/ext >= n {
			phys = l / ext
		}
		oldFile.Extents = append(oldFile.Extents, ext4.Extent{Logical: l, Physical: phys * ext, Len: min(ext, oldFile.Size-l)})
	}
	newFile := ext4.File{Path: "/f", Size: int64(len(p.newImg)), Extents: []ext4.Extent{{Len: int64(len(p.newImg))}}}
	swapped := bytes.Clone(p.oldImg)
	for _, x := range oldFile.Extents {
		copy(swapped[x.Physical:x.Physical+x.Len], p.oldImg[x.Logical:x.Logical+x.Len])
	}
	var deltas bytes.Buffer
	res, err := BuildDelta(t.Context(), bytes.NewReader(swapped), int64(len(swapped)), bytes.NewReader(p.newImg), p.x, &deltas,
		WithFiles(NewFileMap([]ext4.File{oldFile}), NewFileMap([]ext4.File{newFile})))
	if err != nil {
		t.Fatal(err)
	}
	p.oldImg, p.res, p.deltas = swapped, res, deltas.Bytes()
	return p
}

// TestDelta2Rebuilds: a version 2 index parses, names more than one range where a
// chunk's old bytes lie apart, and its deltas decode with them.
func TestDelta2Rebuilds(t *testing.T) {
	p := fuzzPair2(t)
	d := p.parse(t)
	if d.Version != 2 || d.Count() == 0 || p.res.ByFile == 0 {
		t.Fatalf("version %d, %d records, %d by file", d.Version, d.Count(), p.res.ByFile)
	}
	dec, err := NewDeltaDecoder(p.x)
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	most := 0
	for k := range d.Count() {
		dc := d.At(k)
		most = max(most, dc.N)
		if _, err := dec.Decode(dc, p.frame(dc), bytes.NewReader(p.oldImg)); err != nil {
			t.Fatalf("record %d: %v", k, err)
		}
	}
	if most <= MaxRanges {
		t.Errorf("at most %d ranges a record: version 2 names more where they lie apart", most)
	}
}

// TestParseDelta2Refuses: the fields of a version 2 record a device must not follow
// are refused, naming the field.
func TestParseDelta2Refuses(t *testing.T) {
	p := fuzzPair2(t)
	rec0 := DeltaHeaderSize
	for _, tc := range []struct {
		name  string
		raw   func(r []byte) []byte
		field string
	}{
		{"another method", func(r []byte) []byte { r[rec0+9] = 2; return r }, "delta.chunk[0].method"},
		{"reserved not zeros", func(r []byte) []byte { r[rec0+15] = 1; return r }, "delta.chunk[0].reserved"},
		{"no ranges", func(r []byte) []byte { r[rec0+8] = 0; return r }, "delta.chunk[0].ranges"},
		{"more ranges than MaxRanges2", func(r []byte) []byte { r[rec0+8] = MaxRanges2 + 1; return r }, "delta.chunk[0].ranges"},
		{"range past the older image", func(r []byte) []byte {
			binary.LittleEndian.PutUint64(r[rec0+16:], 1<<40)
			return r
		}, "delta.chunk[0].range[0]"},
		{"range of no bytes", func(r []byte) []byte {
			binary.LittleEndian.PutUint32(r[rec0+24:], 0)
			return r
		}, "delta.chunk[0].range[0]"},
		{"dictionary larger than MaxDict", func(r []byte) []byte {
			binary.LittleEndian.PutUint64(r[rec0+16:], 0)
			binary.LittleEndian.PutUint32(r[rec0+24:], uint32(len(p.oldImg)))
			return r
		}, "delta.chunk[0].ranges"},
		{"bytes after the last record", func(r []byte) []byte { return append(r, 0) }, "delta.index"},
		{"ends inside a record", func(r []byte) []byte { return r[:len(r)-5] }, fmt.Sprintf("delta.chunk[%d].ranges", p.res.Count-1)},
		{"version 3", func(r []byte) []byte { r[7] = 3; return r }, "delta.index.header.version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := p.res.Expect()
			raw, err := decompressUpTo(p.res.Index, DeltaIndexSize(want.Count))
			if err != nil {
				t.Fatal(err)
			}
			file, err := compressIndex(tc.raw(raw))
			if err != nil {
				t.Fatal(err)
			}
			// The frames stay as they are: the file's size follows the index's.
			want.IndexSize, want.IndexSHA256 = int64(len(file)), expectFor(file, Expect{}).IndexSHA256
			want.Size = want.IndexSize + p.res.DeltasSize
			_, err = ParseDelta(file, want, p.x, "delta")
			var e *ota.Error
			if ota.CodeOf(err) != ota.CodeIndexMismatch || !asErr(err, &e) || e.Field != tc.field {
				t.Fatalf("want index_mismatch at %s, got %v", tc.field, err)
			}
		})
	}
}

// FuzzParseDelta2 feeds hostile version 2 delta indexes, the manifest's count and
// sizes taken from the header. Whatever is accepted keeps ParseDelta's promises:
// records in order, of chunks that are not zeros, deltas shorter than the chunks as
// stored tiling the file, 1 to MaxRanges2 ranges inside the older image, dictionaries
// within MaxDict.
func FuzzParseDelta2(f *testing.F) {
	p := fuzzPair2(f)
	raw, _ := decompressUpTo(p.res.Index, DeltaIndexSize(p.res.Count))
	f.Add(raw)
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) < DeltaHeaderSize {
			return
		}
		want := DeltaExpect{From: p.res.Expect().From, FromSize: int64(binary.LittleEndian.Uint64(raw[72:80])),
			Count: int64(min(binary.LittleEndian.Uint64(raw[80:88]), 1<<20))}
		file, err := compressIndex(raw)
		if err != nil {
			t.Fatal(err)
		}
		want.IndexSize, want.IndexSHA256 = int64(len(file)), expectFor(file, Expect{}).IndexSHA256
		want.Size = want.IndexSize + int64(min(binary.LittleEndian.Uint64(raw[88:96]), 1<<40))
		d, err := ParseDelta(file, want, p.x, "delta")
		if err != nil {
			if ota.CodeOf(err) != ota.CodeIndexMismatch {
				t.Fatalf("refusal is not index_mismatch: %v", err)
			}
			return
		}
		off := want.IndexSize
		for k := range d.Count() {
			dc := d.At(k)
			c := p.x.Chunk(dc.Chunk)
			if dc.Offset != off || c.Kind == KindZero || dc.Length < 1 || dc.Length >= c.StoreLength || (k > 0 && dc.Chunk <= d.At(k-1).Chunk) {
				t.Fatalf("record %d: %+v for chunk %+v", k, dc, c)
			}
			if dc.N < 1 || dc.N > MaxRanges2 || dc.N != len(dc.Ranges) || dc.DictLen() > MaxDict(p.x) {
				t.Fatalf("record %d: ranges %+v", k, dc)
			}
			for _, r := range dc.Ranges {
				if r.Len < 1 || r.Off < 0 || r.Off+r.Len > d.FromSize {
					t.Fatalf("record %d: range %+v outside %d", k, r, d.FromSize)
				}
			}
			off += int64(dc.Length)
		}
		if off != want.Size {
			t.Fatalf("deltas end at %d of %d", off, want.Size)
		}
	})
}
