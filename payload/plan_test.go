package payload

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/otad/otad/ota"
)

// planIndex is ten 4 KiB chunks; the comments give each one's store range.
func planIndex(t *testing.T) *Index {
	t.Helper()
	const cs = 4096
	kinds := []struct {
		kind Kind
		n    uint32
	}{
		{KindZstd, 1000}, // 0: [0, 1000)
		{KindZstd, 2000}, // 1: [1000, 3000)
		{KindZero, 0},    // 2
		{KindRaw, cs},    // 3: [3000, 7096)
		{KindZstd, 500},  // 4: [7096, 7596)
		{KindZstd, 500},  // 5: [7596, 8096)
		{KindZero, 0},    // 6
		{KindRaw, cs},    // 7: [8096, 12192)
		{KindZstd, 100},  // 8: [12192, 12292)
		{KindZstd, 100},  // 9: [12292, 12392)
	}
	recs := make([]record, len(kinds))
	for i, k := range kinds {
		recs[i] = record{sum: chunkSum(i), length: k.n, kind: k.kind}
		if k.kind == KindZero {
			recs[i].sum = zeroSum(cs)
		}
	}
	data, want := makeIndex(cs, 10*cs, ota.CompressionZstd, recs)
	x, err := ParseIndex(data, want)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func chunkSum(i int) [32]byte { return [32]byte{byte(i + 1), 0xaa} }

func TestMakePlan(t *testing.T) {
	const cs = 4096
	target := func(chunks ...int) func(int) bool {
		return func(i int) bool {
			for _, c := range chunks {
				if c == i {
					return true
				}
			}
			return false
		}
	}
	for _, tc := range []struct {
		name    string
		in      PlanInput
		steps   string // one letter per chunk from Next: Target, Zero, Booted, Network
		booted  map[int]int64
		fetches []Fetch
	}{
		{"fresh install: one request", PlanInput{}, "NNZNNNZNNN", nil,
			[]Fetch{{0, 12392, 0, 10}}},
		{"requests split at MaxSpan", PlanInput{MaxSpan: 4096}, "NNZNNNZNNN", nil,
			[]Fetch{{0, 3000, 0, 2}, {3000, 4096, 3, 4}, {7096, 1000, 4, 6}, {8096, 4096, 7, 8}, {12192, 200, 8, 10}}},
		{"a chunk larger than MaxSpan gets a request of its own", PlanInput{MaxSpan: 1000}, "NNZNNNZNNN", nil,
			[]Fetch{{0, 1000, 0, 1}, {1000, 2000, 1, 2}, {3000, 4096, 3, 4}, {7096, 1000, 4, 6}, {8096, 4096, 7, 8}, {12192, 200, 8, 10}}},
		{"resume at the checkpoint", PlanInput{Next: 5}, "NZNNN", nil,
			[]Fetch{{7596, 4796, 5, 10}}},
		{"checkpoint at the end", PlanInput{Next: 10}, "", nil, nil},
		{"target holds chunks written before the restart, zero chunk too", PlanInput{Next: 1, TargetHas: target(1, 2, 9)}, "TTNNNZNNT", nil,
			[]Fetch{{3000, 9292, 3, 9}}},
		{"booted slot holds two chunks", PlanInput{Booted: haveOf(map[[32]byte]int64{chunkSum(4): 123456, chunkSum(8): 7})}, "NNZNBNZNBN", map[int]int64{4: 123456, 8: 7},
			[]Fetch{{0, 7096, 0, 4}, {7596, 4596, 5, 8}, {12292, 100, 9, 10}}},
		{"MaxGap carries the booted chunks' bytes rather than split", PlanInput{Booted: haveOf(map[[32]byte]int64{chunkSum(4): 123456, chunkSum(8): 7}), MaxGap: 500}, "NNZNBNZNBN", map[int]int64{4: 123456, 8: 7},
			[]Fetch{{0, 12392, 0, 10}}},
		{"MaxGap smaller than the gap", PlanInput{Booted: haveOf(map[[32]byte]int64{chunkSum(4): 123456}), MaxGap: 499}, "NNZNBNZNNN", map[int]int64{4: 123456},
			[]Fetch{{0, 7096, 0, 4}, {7596, 4796, 5, 10}}},
		{"zeros before the booted slot", PlanInput{Booted: haveOf(map[[32]byte]int64{zeroSum(cs): 0})}, "NNZNNNZNNN", nil,
			[]Fetch{{0, 12392, 0, 10}}},
		{"target before the booted slot", PlanInput{TargetHas: target(4), Booted: haveOf(map[[32]byte]int64{chunkSum(4): 5})}, "NNZNTNZNNN", nil,
			[]Fetch{{0, 7096, 0, 4}, {7596, 4796, 5, 10}}},
		{"everything local", PlanInput{TargetHas: func(int) bool { return true }}, "TTTTTTTTTT", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := MakePlan(planIndex(t), tc.in)
			if err != nil {
				t.Fatal(err)
			}
			var steps []byte
			var net, zero, booted, tgt int64
			for k, s := range p.Steps {
				if s.Chunk != tc.in.Next+k {
					t.Fatalf("step %d is for chunk %d", k, s.Chunk)
				}
				steps = append(steps, "TZBN"[s.Source])
				if s.Source == FromBooted && s.BootedOffset != tc.booted[s.Chunk] {
					t.Errorf("chunk %d from booted offset %d, want %d", s.Chunk, s.BootedOffset, tc.booted[s.Chunk])
				}
				switch s.Source {
				case FromTarget:
					tgt += cs
				case FromZero:
					zero += cs
				case FromBooted:
					booted += cs
				case FromNetwork:
					net += cs
				}
			}
			if string(steps) != tc.steps {
				t.Errorf("steps %s, want %s", steps, tc.steps)
			}
			if !reflect.DeepEqual(p.Fetches, tc.fetches) {
				t.Errorf("fetches %v, want %v", p.Fetches, tc.fetches)
			}
			var fetch int64
			for _, f := range tc.fetches {
				fetch += f.Length
			}
			if p.TargetBytes != tgt || p.ZeroBytes != zero || p.BootedBytes != booted || p.NetworkBytes != net || p.FetchBytes != fetch {
				t.Errorf("bytes target %d zero %d booted %d network %d fetch %d, want %d %d %d %d %d",
					p.TargetBytes, p.ZeroBytes, p.BootedBytes, p.NetworkBytes, p.FetchBytes, tgt, zero, booted, net, fetch)
			}
		})
	}
}

func TestMakePlanRefusesCheckpointOutside(t *testing.T) {
	x := planIndex(t)
	for _, next := range []int{-1, 11} {
		if _, err := MakePlan(x, PlanInput{Next: next}); err == nil {
			t.Errorf("checkpoint %d accepted", next)
		}
	}
}

// TestBootedChunks: the first offset of each hash, zero chunks left out.
func TestBootedChunks(t *testing.T) {
	const cs = 4096
	data, want := makeIndex(cs, 4*cs-10, ota.CompressionNone, []record{
		{sum: chunkSum(0), length: cs, kind: KindRaw},
		{sum: zeroSum(cs), kind: KindZero},
		{sum: chunkSum(0), length: cs, kind: KindRaw},
		{sum: chunkSum(3), length: cs - 10, kind: KindRaw},
	})
	x, err := ParseIndex(data, want)
	if err != nil {
		t.Fatal(err)
	}
	sameChunks(t, BootedChunks(x), map[[32]byte]int64{chunkSum(0): 0, chunkSum(3): 3 * cs})
}

// TestScanChunksFindsWhatBootedChunksFinds: hashing an image chunk by chunk lists the
// same chunks as its index does, and a plan from either reuses the same bytes.
func TestScanChunksFindsWhatBootedChunksFinds(t *testing.T) {
	old := testImage(200<<10+300, 9000, 4)
	b := build(t, old, Options{ChunkSize: 4 << 10})
	// The slot is larger than the image; what follows the image is not listed.
	slot := append(bytes.Clone(old), bytes.Repeat([]byte{0xee}, 3<<10)...)
	got, err := ScanChunks(t.Context(), bytes.NewReader(slot), 4<<10, int64(len(old)))
	if err != nil {
		t.Fatal(err)
	}
	want := BootedChunks(b.parse(t))
	want.Find([32]byte{}) // sorted and compacted, as got will be
	if got.Find([32]byte{}); !reflect.DeepEqual(got.entries, want.entries) {
		t.Fatalf("scanned %d chunks, the index lists %d", len(got.entries), len(want.entries))
	}
	if _, err := ScanChunks(t.Context(), bytes.NewReader(slot), 1000, 10); err == nil {
		t.Fatal("chunk size 1000 accepted")
	}
	if _, err := ScanChunks(t.Context(), iotest.ErrReader(errors.New("bad sector")), 4<<10, 1<<20); err == nil || !strings.Contains(err.Error(), "bad sector") {
		t.Fatalf("read error: %v", err)
	}
}

// TestPlanReusesAChangedImage: an image that differs from the booted one in 1% of its
// chunks, scattered, fetches only those chunks (with the index, docs/contract/chunked.md's 3% bound).
func TestPlanReusesAChangedImage(t *testing.T) {
	const cs = 4 << 10
	old := testImage(4<<20, 3000, 5)
	changed := bytes.Clone(old)
	var touched int
	for i := 7; i < len(old)/cs; i += 100 { // 1% of the chunks
		changed[i*cs+17] ^= 0xff
		touched++
	}
	was, now := build(t, old, Options{ChunkSize: cs}), build(t, changed, Options{ChunkSize: cs})
	p, err := MakePlan(now.parse(t), PlanInput{Booted: BootedChunks(was.parse(t))})
	if err != nil {
		t.Fatal(err)
	}
	if p.NetworkBytes != int64(touched*cs) || len(p.Fetches) != touched {
		t.Fatalf("%d network bytes in %d requests, want %d chunks", p.NetworkBytes, len(p.Fetches), touched)
	}
	if limit := now.res.StoreSize*3/100 + int64(len(now.res.Index)); p.FetchBytes+int64(len(now.res.Index)) > limit {
		t.Fatalf("fetches %d bytes plus a %d-byte index, more than 3%% of the %d-byte store plus the index", p.FetchBytes, len(now.res.Index), now.res.StoreSize)
	}
}

// haveOf is a chunk list with the chunks of m.
func haveOf(m map[[32]byte]int64) *Have {
	h := &Have{}
	for sum, off := range m {
		h.Add(sum, off)
	}
	return h
}

// sameChunks checks that h lists exactly the chunks of want.
func sameChunks(t *testing.T, h *Have, want map[[32]byte]int64) {
	t.Helper()
	for sum, off := range want {
		if got, ok := h.Find(sum); !ok || got != off {
			t.Errorf("chunk %x: at %d (%v), want %d", sum[:4], got, ok, off)
		}
	}
	if len(h.entries) != len(want) {
		t.Errorf("%d chunks listed, want %d", len(h.entries), len(want))
	}
}

// TestHave: the first offset added for a hash is found, other hashes are not, and the
// list survives a round trip through its bytes.
func TestHave(t *testing.T) {
	h := &Have{}
	h.Add(chunkSum(1), 10)
	h.Add(chunkSum(2), 20)
	h.Add(chunkSum(1), 30)
	if _, ok := (*Have)(nil).Find(chunkSum(1)); ok || (*Have)(nil).Len() != 0 {
		t.Fatal("a nil list holds something")
	}
	b, err := h.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var back Have
	if err := back.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	for _, l := range []*Have{h, &back} {
		sameChunks(t, l, map[[32]byte]int64{chunkSum(1): 10, chunkSum(2): 20})
		if _, ok := l.Find(chunkSum(3)); ok {
			t.Fatal("found a chunk never added")
		}
	}
	if err := back.UnmarshalBinary(b[:15]); err == nil {
		t.Fatal("15 bytes accepted")
	}
}
