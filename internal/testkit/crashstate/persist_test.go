package crashstate

import (
	"bytes"
	"context"
	"hash/maphash"
	"maps"
	"slices"
	"testing"
)

// replay is the model's definition, done the slow way: the trace up to the
// point, in order, each operation applied if durable or kept.
func replay(s State, initial *Image, ops []Op) *Image {
	cov := cover(ops)
	img := initial.clone()
	kept := map[int]bool{}
	for _, i := range s.Keep {
		kept[i] = true
	}
	for i := range s.K {
		switch {
		case ops[i].Kind == OpMark || ops[i].Kind == OpSync || ops[i].Kind == OpSyncDir:
		case cov[i] <= s.K:
			img.apply(ops[i], -1)
		case kept[i] && s.Torn >= 0 && i == s.Keep[len(s.Keep)-1]:
			img.apply(ops[i], s.Torn)
		case kept[i]:
			img.apply(ops[i], -1)
		}
	}
	return img
}

func sameFiles(a, b *Image) bool {
	if !slices.Equal(slices.Sorted(maps.Keys(a.Names)), slices.Sorted(maps.Keys(b.Names))) {
		return false
	}
	for n := range a.Names {
		if !bytes.Equal(a.File(n), b.File(n)) {
			return false
		}
	}
	return true
}

// Walk builds, from one image carried from point to point, exactly what
// replaying the trace in order builds, for every state of a recorded update.
func TestWalkIsReplay(t *testing.T) {
	fx := fixture(t)
	for _, sc := range []Scenario{{Stream, UBootRedundant, Rollback}, {Stream, GRUB, Commit}} {
		r, err := NewRig(sc, fx, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		initial, ops, err := record(context.Background(), r, fx.offers[sc.Mode])
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		Model{Subsets: 4, Tears: 8, Seed: 3}.Walk(initial, ops, maphash.MakeSeed(), func(s State, build func() *Image) bool {
			img := build()
			n++
			if !sameFiles(img, replay(s, initial, ops)) {
				t.Fatalf("%s: %s: the walk and the replay differ", sc, s)
			}
			return true
		})
		if n != len(Model{Subsets: 4, Tears: 8, Seed: 3}.States(ops)) || n < 100 {
			t.Fatalf("%s: walked %d states", sc, n)
		}
	}
}

// The persistence model on a small trace: a temp file written, synced,
// renamed over the journal, its directory synced.
func TestModelStates(t *testing.T) {
	initial := &Image{Names: map[string]int{"state/j": 0}, Data: map[int][]byte{0: []byte("old")}, owned: map[int]bool{}}
	ops := []Op{
		{Kind: OpCreate, Name: "state/.j.tmp-1", Inode: 1},
		{Kind: OpWrite, Inode: 1, Data: bytes.Repeat([]byte("n"), 1100)},
		{Kind: OpSync, Inode: 1},
		{Kind: OpRename, Name: "state/.j.tmp-1", To: "state/j"},
		{Kind: OpSyncDir, Dir: "state"},
	}
	if got := cover(ops); !slices.Equal(got, []int{5, 3, 3, 5, 5}) {
		t.Fatalf("cover %v", got)
	}
	if got := pending(cover(ops), 4); !slices.Equal(got, []int{0, 3}) {
		t.Fatalf("pending before the dir sync: %v", got)
	}
	journals := map[string]bool{}
	Model{Subsets: 4, Tears: 8}.Walk(initial, ops, maphash.MakeSeed(), func(s State, build func() *Image) bool {
		img := build()
		j := string(img.File("state/j"))
		if j != "old" && j != string(ops[1].Data) {
			t.Errorf("%s: the journal holds %d bytes of neither version", s, len(j))
		}
		journals[j] = true
		return true
	})
	if len(journals) != 2 {
		t.Fatalf("the journal versions seen: %d, want old and new", len(journals))
	}
	if got := tearPoints(1100, 8); !slices.Equal(got, []int{1, 5, 64, 256, 512, 1024, 1025, 1062, 1099}) {
		t.Fatalf("tear points %v", got)
	}
}
