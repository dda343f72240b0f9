package payload

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/otad/otad/internal/testkit/imagetest"
	"github.com/otad/otad/ota"
)

// TestPatchRoundTrip: the patch of a chunk against a source makes that chunk again,
// for sources that hold it, hold it changed, hold none of it, or are empty.
func TestPatchRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	src := random(200 << 10)
	shifted := slices.Concat(src[1000:50000], random(333), src[60000:90000])
	for i := 7; i < len(shifted); i += 16 {
		shifted[i] += 3
	}
	for _, tc := range []struct {
		name     string
		src, new []byte
		smaller  int // the patch compresses to less than this, when not 0
	}{
		{"the same bytes", src[5000:70000], src[5000:70000], 0},
		{"moved and changed", src, shifted, len(shifted) / 4},
		{"nothing in common", src, random(40 << 10), 0},
		{"an empty source", nil, random(1000), 0},
		{"a chunk of one byte", src, src[9:10], 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newDiffSource(tc.src).patch(tc.new)
			got, err := applyPatch(make([]byte, 0, len(tc.new)), p, len(tc.new), bytes.NewReader(tc.src), int64(len(tc.src)))
			if err != nil || !bytes.Equal(got, tc.new) {
				t.Fatalf("applied: %v, %d bytes, equal %v", err, len(got), bytes.Equal(got, tc.new))
			}
			if int64(len(p)) > maxPatch(int64(len(tc.new))) {
				t.Errorf("a patch of %d bytes for %d", len(p), len(tc.new))
			}
			if tc.smaller > 0 {
				if n := len(compress(t, p)); n >= tc.smaller {
					t.Errorf("the patch compresses to %d bytes, want less than %d", n, tc.smaller)
				}
			}
		})
	}
}

func compress(t testing.TB, b []byte) []byte {
	t.Helper()
	e := &deltaEncoder{}
	defer e.close()
	enc, err := e.patchEncoder()
	if err != nil {
		t.Fatal(err)
	}
	return enc.EncodeAll(b, nil)
}

// TestPatchRefuses: patches that do not make exactly the chunk from the source's
// bytes are refused as corrupt.
func TestPatchRefuses(t *testing.T) {
	src := bytes.Repeat([]byte("0123456789"), 100)
	patch := func(ctrl []int64, diff, extra []byte) []byte {
		var c []byte
		for k, v := range ctrl {
			if k%3 == 2 {
				c = binary.AppendVarint(c, v)
			} else {
				c = binary.AppendUvarint(c, uint64(v))
			}
		}
		p := binary.AppendUvarint(nil, uint64(len(c)))
		p = binary.AppendUvarint(p, uint64(len(diff)))
		p = binary.AppendUvarint(p, uint64(len(extra)))
		return slices.Concat(p, c, diff, extra)
	}
	good := patch([]int64{10, 2, 5}, make([]byte, 10), []byte("ab"))
	if got, err := applyPatch(nil, good, 12, bytes.NewReader(src), int64(len(src))); err != nil || string(got) != "0123456789ab" {
		t.Fatalf("a good patch: %q, %v", got, err)
	}
	for _, tc := range []struct {
		name  string
		patch []byte
		n     int
	}{
		{"no lengths", nil, 12},
		{"sections longer than the patch", append(binary.AppendUvarint(nil, 1000), 0, 0), 12},
		{"a chunk shorter than it makes", good, 11},
		{"a chunk longer than it makes", good, 13},
		{"adds past the source", patch([]int64{10, 0, 995, 10, 2, 0}, make([]byte, 20), []byte("ab")), 22},
		{"seeks before the source", patch([]int64{10, 0, -11, 1, 2, 0}, make([]byte, 11), []byte("ab")), 13},
		{"adds more than the diff bytes", patch([]int64{10, 2, 0}, make([]byte, 9), []byte("ab")), 12},
		{"copies more than the extra bytes", patch([]int64{10, 3, 0}, make([]byte, 10), []byte("ab")), 13},
		{"diff bytes left over", patch([]int64{10, 2, 0}, make([]byte, 11), []byte("ab")), 12},
		{"a control cut short", patch([]int64{10, 2}, make([]byte, 10), []byte("ab")), 12},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := applyPatch(make([]byte, 0, tc.n), tc.patch, tc.n, bytes.NewReader(src), int64(len(src))); !errors.Is(err, errPatch) {
				t.Fatalf("want a corrupt patch, got %v", err)
			}
		})
	}
}

// FuzzApplyPatch: any patch makes exactly the chunk or is refused, and never
// reads outside its source.
func FuzzApplyPatch(f *testing.F) {
	src := bytes.Repeat([]byte("source bytes "), 40)
	f.Add(newDiffSource(src).patch([]byte("source bytes changed source bytes")), 33)
	f.Add([]byte{3, 0, 2, 0, 2, 0, 'a', 'b'}, 2)
	f.Fuzz(func(t *testing.T, patch []byte, n int) {
		if n < 0 || n > 1<<16 {
			return
		}
		out, err := applyPatch(make([]byte, 0, n), patch, n, bytes.NewReader(src), int64(len(src)))
		if err == nil && len(out) != n {
			t.Fatalf("made %d bytes of %d", len(out), n)
		}
		if err != nil && !errors.Is(err, errPatch) {
			t.Fatalf("not a corrupt patch: %v", err)
		}
	})
}

// TestBinaryDiffRebuiltFile: an executable rebuilt (code inserted, every address
// after it moved) is rebuilt from its own old bytes by binary diffs, less than an
// eighth of the chunks as stored, each decoded to its chunk; a diff corrupted, or the old file's bytes in the booted slot changed, is refused.
func TestBinaryDiffRebuiltFile(t *testing.T) {
	m := imagetest.RebuiltPair(t, 3, 48<<20)
	x := build(t, m.New, Options{Chunking: ota.ChunkingCDC, Level: 3}).parse(t)
	file := fileOf(t, fileMapOf(t, m.New), m.Path)
	res, d, frame := fileDelta(t, m, x)
	dec, err := NewDeltaDecoder(x)
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	var stored, diffs int64
	var first *DeltaChunk
	for i := range x.Count() {
		c := x.Chunk(i)
		// The chunks before the inserted code are held as they were.
		if !inside(Range{c.Offset, int64(c.Length)}, file) || bytes.Contains(m.Old, m.New[c.Offset:c.Offset+int64(c.Length)]) {
			continue
		}
		stored += int64(c.StoreLength)
		dc, ok := d.Find(i)
		if !ok || dc.Method != deltaMethodDiff {
			t.Errorf("chunk %d of the rebuilt file: delta %v, method %d", i, ok, dc.Method)
			continue
		}
		diffs += int64(dc.Length)
		if first == nil {
			first = &dc
		}
		if _, err := dec.Decode(dc, frame(dc), bytes.NewReader(m.Old)); err != nil {
			t.Fatalf("chunk %d: %v", i, err)
		}
	}
	t.Logf("rebuilt file: %d bytes stored, %d bytes of binary diffs (%d of them in all)", stored, diffs, res.ByDiff)
	if first == nil || diffs*8 > stored {
		t.Fatalf("%d bytes of binary diffs for %d stored", diffs, stored)
	}
	corrupt := bytes.Clone(frame(*first))
	corrupt[len(corrupt)/2] ^= 0x40
	altered := bytes.Clone(m.Old)
	for _, r := range first.Ranges {
		for o := r.Off + 100; o < r.Off+r.Len; o += 700 {
			altered[o] ^= 0x11
		}
	}
	for name, try := range map[string]func() error{
		"the diff corrupt": func() error { _, err := dec.Decode(*first, corrupt, bytes.NewReader(m.Old)); return err },
		"the old file altered": func() error {
			_, err := dec.Decode(*first, frame(*first), bytes.NewReader(altered))
			return err
		},
	} {
		if err := try(); ota.CodeOf(err) != ota.CodeChunkMismatch {
			t.Errorf("%s: want chunk_mismatch, got %v", name, err)
		}
	}
}

// FuzzDecodeDiff feeds hostile binary diff frames, with the older image's bytes
// altered: a chunk is made only when it is the chunk; everything else is
// chunk_mismatch.
func FuzzDecodeDiff(f *testing.F) {
	p := fuzzPair(f)
	d := p.parse(f)
	dc := d.At(0)
	dc.Method = deltaMethodDiff
	ch := p.x.Chunk(dc.Chunk)
	var src []byte
	for _, r := range dc.Ranges[:dc.N] {
		src = append(src, p.oldImg[r.Off:r.Off+r.Len]...)
	}
	frame := compress(f, newDiffSource(src).patch(p.newImg[ch.Offset:ch.Offset+int64(ch.Length)]))
	f.Add(frame, []byte{})
	f.Add(frame, []byte{1, 2, 3})
	f.Add(compress(f, []byte{3, 0, 2, 0, 2, 0, 'a', 'b'}), []byte{})
	f.Fuzz(func(t *testing.T, frame, damage []byte) {
		dec, err := NewDeltaDecoder(p.x)
		if err != nil {
			t.Fatal(err)
		}
		defer dec.Close()
		old := bytes.Clone(p.oldImg)
		r := dc.Ranges[0]
		copy(old[r.Off:r.Off+r.Len], damage)
		c := dc
		c.Length = len(frame)
		got, err := dec.Decode(c, frame, bytes.NewReader(old))
		if err != nil {
			if ota.CodeOf(err) != ota.CodeChunkMismatch {
				t.Fatalf("refusal is not chunk_mismatch: %v", err)
			}
			return
		}
		if !bytes.Equal(got, p.newImg[ch.Offset:ch.Offset+int64(ch.Length)]) {
			t.Fatal("accepted bytes that are not the chunk")
		}
	})
}

// TestDeltaDecoderShared: a DeltaDecoder sharing a PrefixDecoder's zstd state
// (an install of a zstd-prefix store with deltas) rebuilds every chunk, binary
// diffs and zstd deltas alike, between the store's chunks decoded with the
// bytes before them, in image order as an install decodes them.
func TestDeltaDecoderShared(t *testing.T) {
	m := imagetest.RebuiltPair(t, 3, 24<<20)
	b := build(t, m.New, Options{Chunking: ota.ChunkingCDC, Compression: ota.CompressionZstdPrefix, PrefixSize: 1 << 18, Level: 3})
	x := b.parse(t)
	_, d, frame := fileDelta(t, m, x)
	pd, err := NewPrefixDecoder(x)
	if err != nil {
		t.Fatal(err)
	}
	defer pd.Close()
	dec, err := NewDeltaDecoder(x)
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	dec.Share(pd)
	if !dec.shared {
		t.Fatalf("not shared: prefix window %d, delta %d, patch %d", prefixWindow(PrefixSize(x), x.MaxChunk()), deltaWindow(x), patchWindow(x.MaxChunk()))
	}
	hist := NewHistory(PrefixSize(x))
	old := bytes.NewReader(m.Old)
	kinds := map[string]int{}
	for i := range x.Count() {
		c := x.Chunk(i)
		want := m.New[c.Offset : c.Offset+int64(c.Length)]
		if c.Kind == KindZero {
			hist.AddZeros(int64(c.Length)) // written, never held
			continue
		}
		var got []byte
		if dc, ok := d.Find(i); ok {
			got, err = dec.Decode(dc, frame(dc), old)
			kinds[map[bool]string{true: "diff", false: "zstd delta"}[dc.Method == deltaMethodDiff]]++
		} else {
			got, err = pd.Decode(i, b.store[c.StoreOffset:c.StoreOffset+int64(c.StoreLength)], hist.Bytes())
			kinds["store"]++
		}
		if err != nil {
			t.Fatalf("chunk %d: %v", i, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("chunk %d: not the chunk", i)
		}
		hist.Add(got)
	}
	if kinds["diff"] == 0 || kinds["zstd delta"] == 0 || kinds["store"] == 0 {
		t.Fatalf("chunks by kind %v: want each", kinds)
	}
	t.Logf("chunks by kind %v", kinds)
}

// fileDelta is m's file-aware delta against x's chunks, parsed, and the frame
// of each of its records.
func fileDelta(t *testing.T, m imagetest.Rebuilt, x *Index) (*DeltaResult, *Delta, func(DeltaChunk) []byte) {
	t.Helper()
	var out bytes.Buffer
	res, err := BuildDelta(t.Context(), bytes.NewReader(m.Old), int64(len(m.Old)), bytes.NewReader(m.New), x, &out,
		WithFiles(fileMapOf(t, m.Old), fileMapOf(t, m.New)))
	if err != nil {
		t.Fatal(err)
	}
	d, err := ParseDelta(res.Index, res.Expect(), x, "delta")
	if err != nil {
		t.Fatal(err)
	}
	frames := out.Bytes()
	return res, d, func(dc DeltaChunk) []byte {
		o := dc.Offset - int64(len(res.Index))
		return frames[o : o+int64(dc.Length)]
	}
}
