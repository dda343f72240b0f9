package payload

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"io"
	"maps"
	"slices"
	"testing"
	"testing/iotest"

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

// TestPrefixSums: one read of a stream gives the sha256 of each prefix asked for,
// whatever the sizes' order and the reads' sizes; a prefix longer than the stream has
// none.
func TestPrefixSums(t *testing.T) {
	data := testImage(300000, 5000, 7)
	sum := func(n int) [sha256.Size]byte { return sha256.Sum256(data[:n]) }
	for _, tc := range []struct {
		name  string
		sizes []int64
		read  func(io.Reader) io.Reader
		want  map[int64][sha256.Size]byte
	}{
		{"one, whole reads", []int64{100000}, func(r io.Reader) io.Reader { return r }, map[int64][sha256.Size]byte{100000: sum(100000)}},
		{"several, unordered, one byte at a time", []int64{4096, 1, 299999, 4096}, iotest.OneByteReader,
			map[int64][sha256.Size]byte{1: sum(1), 4096: sum(4096), 299999: sum(299999)}},
		{"the whole stream and past it", []int64{300000, 300001, 0, -5}, iotest.HalfReader, map[int64][sha256.Size]byte{300000: sum(300000)}},
		{"none", nil, iotest.DataErrReader, map[int64][sha256.Size]byte{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := NewPrefixSums(tc.read(bytes.NewReader(data)), tc.sizes)
			got, err := io.ReadAll(p)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("read %d bytes, err %v", len(got), err)
			}
			if !maps.Equal(p.Sums(), tc.want) {
				t.Fatalf("sums of %v, want %v", slices.Collect(maps.Keys(p.Sums())), slices.Collect(maps.Keys(tc.want)))
			}
		})
	}
}

// TestDeltaOlderImageSizes: an older image smaller than the new one (the new image's
// end lies past it) or larger gives a delta index a device accepts, with the older
// image's size, whatever the store's compression; every delta rebuilds its chunk.
func TestDeltaOlderImageSizes(t *testing.T) {
	files := imagetest.Files(30, 3)
	base := imagetest.Ext4(t, imagetest.Tree(t, files, nil), 24<<20)
	grown := append(imagetest.Ext4(t, imagetest.Tree(t, imagetest.Updated(files, 1), nil), 24<<20), bytes.Repeat([]byte("appended text, compressible. "), 40000)...)
	for _, tc := range []struct {
		name           string
		oldImg, newImg []byte
	}{
		{"older smaller", base, grown},
		{"older larger", grown, base},
	} {
		for _, comp := range []ota.Compression{ota.CompressionZstd, ota.CompressionNone} {
			t.Run(tc.name+"/"+string(comp), func(t *testing.T) {
				p := makeDeltaPair(t, tc.oldImg, tc.newImg, Options{Chunking: ota.ChunkingCDC, Compression: comp})
				if p.res.FromSize != int64(len(tc.oldImg)) || p.res.Expect().FromSize != int64(len(tc.oldImg)) {
					t.Fatalf("from_size %d, want %d", p.res.FromSize, len(tc.oldImg))
				}
				d := p.parse(t)
				dec, err := NewDeltaDecoder(p.x)
				if err != nil {
					t.Fatal(err)
				}
				defer dec.Close()
				for k := range d.Count() {
					dc := d.At(k)
					c := p.x.Chunk(dc.Chunk)
					got, err := dec.Decode(dc, p.frame(dc), bytes.NewReader(tc.oldImg))
					if err != nil || !bytes.Equal(got, tc.newImg[c.Offset:c.Offset+int64(c.Length)]) {
						t.Fatalf("delta %d: %v", k, err)
					}
				}
				t.Logf("%d deltas; held %d, rebuilt %d, whole %d; fetch %d, without deltas %d",
					d.Count(), p.res.Held, p.res.Rebuilt, p.res.Full, p.res.Fetch(p.x), p.res.FetchChunks(p.x))
			})
		}
	}
}

// TestParseDeltaRefuses: a delta index for another older image, another index, or
// with records a device must not follow is refused, naming the field.
func TestParseDeltaRefuses(t *testing.T) {
	p := fuzzPair(t)
	recAt := func(k int) int { return DeltaHeaderSize + k*DeltaRecordSize }
	for _, tc := range []struct {
		name   string
		raw    func(r []byte)
		expect func(e *DeltaExpect)
		field  string
	}{
		{name: "keyed to another older image", expect: func(e *DeltaExpect) { e.From = expectFor([]byte("x"), Expect{}).IndexSHA256 }, field: "delta.index.header.from"},
		{name: "for another index", raw: func(r []byte) { r[40] ^= 1 }, field: "delta.index.header.index_sha256"},
		{name: "magic", raw: func(r []byte) { r[0] = 'X' }, field: "delta.index.header.magic"},
		{name: "the older image's size differs", raw: func(r []byte) { r[72]++ }, field: "delta.index.header.from_size"},
		{name: "the manifest's older image of another size", expect: func(e *DeltaExpect) { e.FromSize-- }, field: "delta.index.header.from_size"},
		{name: "the manifest's older image of no size", expect: func(e *DeltaExpect) { e.FromSize = 0 }, field: "delta.from_size"},
		{name: "size disagrees with deltas_size", expect: func(e *DeltaExpect) { e.Size++ }, field: "delta.index.header.deltas_size"},
		{name: "chunks out of order", raw: func(r []byte) {
			binary.LittleEndian.PutUint32(r[recAt(0):], 1<<20)
		}, field: "delta.chunk[0].chunk"},
		{name: "delta as long as the stored chunk", raw: func(r []byte) {
			binary.LittleEndian.PutUint32(r[recAt(0)+4:], 1<<24)
		}, field: "delta.chunk[0].length"},
		{name: "no ranges", raw: func(r []byte) { r[recAt(0)+8] = 0 }, field: "delta.chunk[0].ranges"},
		{name: "range past the older image", raw: func(r []byte) {
			binary.LittleEndian.PutUint64(r[recAt(0)+16:], 1<<40)
		}, field: "delta.chunk[0].range[0]"},
		{name: "dictionary larger than MaxDict", raw: func(r []byte) {
			binary.LittleEndian.PutUint64(r[recAt(0)+16:], 0)
			binary.LittleEndian.PutUint32(r[recAt(0)+24:], uint32(len(p.oldImg)))
		}, field: "delta.chunk[0].ranges"},
		{name: "unused range not zeros", raw: func(r []byte) { r[recAt(0)+16+12*3] = 1 }, field: "delta.chunk[0].range[3]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := p.res.Expect()
			file := p.res.Index
			if tc.raw != nil {
				raw, err := decompressExact(file, DeltaIndexSize(want.Count))
				if err != nil {
					t.Fatal(err)
				}
				tc.raw(raw)
				if file, err = compressIndex(raw); err != nil {
					t.Fatal(err)
				}
				// The frames stay where they are: the file's size follows the index's.
				want.Size += int64(len(file)) - want.IndexSize
				want.IndexSize, want.IndexSHA256 = int64(len(file)), expectFor(file, Expect{}).IndexSHA256
			}
			if tc.expect != nil {
				tc.expect(&want)
			}
			_, err := ParseDelta(file, want, p.x, "delta")
			var e *ota.Error
			if ota.CodeOf(err) != ota.CodeIndexMismatch || !asErr(err, &e) || e.Field != tc.field {
				t.Fatalf("want index_mismatch at %s, got %v", tc.field, err)
			}
		})
	}
}
