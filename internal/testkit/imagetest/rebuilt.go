package imagetest

import (
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"testing"
)

// Rebuilt is a pair of ext4 images of size bytes for binary diffs: the file Path,
// an executable's kind of bytes (RebuiltSize of them: random code with an address
// in every 16 bytes), is rebuilt in the newer image — code inserted at two fifths of
// it, so that every address after moves by as much — as a compiler does with a small
// change; the other files are Files(16, seed) and Updated.
type Rebuilt struct {
	Old, New []byte
	Path     string
}

// RebuiltSize is the rebuilt file's size in the older image.
const RebuiltSize = 3 << 19

// RebuiltPair makes the images of Rebuilt.
func RebuiltPair(t testing.TB, seed uint64, size int64) Rebuilt {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 17))
	code := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	old := code(RebuiltSize)
	for i := 12; i+4 <= len(old); i += 16 {
		binary.LittleEndian.PutUint32(old[i:], uint32(i*3))
	}
	const at, inserted = RebuiltSize * 2 / 5 & ^15, 4096
	changed := slices.Concat(old[:at], code(inserted), old[at:])
	for i := at + inserted + 12; i+4 <= len(changed); i += 16 {
		binary.LittleEndian.PutUint32(changed[i:], binary.LittleEndian.Uint32(changed[i:])+inserted)
	}
	files := Files(16, seed)
	oldDir, newDir := Tree(t, files, nil), Tree(t, Updated(files, seed), nil)
	r := Rebuilt{Path: "/usr/bin/tool"}
	put(t, oldDir, r.Path, old)
	put(t, newDir, r.Path, changed)
	r.Old, r.New = Ext4(t, oldDir, size), Ext4(t, newDir, size)
	return r
}
