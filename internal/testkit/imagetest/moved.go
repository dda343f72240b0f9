package imagetest

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// Moved is a pair of ext4 images of size bytes for file-aware deltas: in the newer,
// the older's file OldPath (MovedSize random bytes) is renamed to NewPath in another
// directory and changed — a byte in every KiB, so that no piece of it and no chunk
// is held as it was — and a file that came before it is gone, so that it lies
// elsewhere in the image; the other files are Files(16, seed) and Updated.
type Moved struct {
	Old, New         []byte
	OldPath, NewPath string
}

// MovedSize is the moved file's size.
const MovedSize = 3 << 19

// MovedPair makes the images of Moved.
func MovedPair(t testing.TB, seed uint64, size int64) Moved {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 13))
	moved := make([]byte, MovedSize)
	for i := range moved {
		moved[i] = byte(rng.Uint32())
	}
	changed := bytes.Clone(moved)
	for i := 512; i < len(changed); i += 1024 {
		changed[i] ^= 0xa5
	}
	files := Files(16, seed)
	m := Moved{OldPath: "/d1/lib/moved.bin", NewPath: "/opt/pkg/moved.bin"}
	oldDir, newDir := Tree(t, files, nil), Tree(t, Updated(files, seed), nil)
	put(t, oldDir, "/d0/aaa-gone", bytes.Repeat([]byte("a file the newer image drops\n"), 20000))
	put(t, oldDir, m.OldPath, moved)
	put(t, newDir, m.NewPath, changed)
	m.Old, m.New = Ext4(t, oldDir, size), Ext4(t, newDir, size)
	return m
}

// put writes b as the file p (a path from the root) of the tree dir.
func put(t testing.TB, dir, p string, b []byte) {
	t.Helper()
	p = filepath.Join(dir, filepath.FromSlash(p))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, fixed, fixed); err != nil {
		t.Fatal(err)
	}
}
