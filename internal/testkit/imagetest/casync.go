package imagetest

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/otad/otad/internal/testkit/testtool"
)

// casyncChunks cuts img with casync (its default chunk sizes: 16, 64 and 256 KiB) and
// returns, from its .caibx index, each chunk's id and size.
func casyncChunks(t testing.TB, img []byte) (ids [][32]byte, sizes []int64) {
	t.Helper()
	casync := testtool.Require(t, "casync", "casync")
	dir := t.TempDir()
	in, idx := filepath.Join(dir, "img"), filepath.Join(dir, "img.caibx")
	testtool.WriteFile(t, in, img)
	if out, err := exec.Command(casync, "make", "--compression=zstd", "--store="+filepath.Join(dir, "store"), idx, in).CombinedOutput(); err != nil {
		t.Fatalf("casync make: %v: %s", err, out)
	}
	b, err := os.ReadFile(idx)
	if err != nil {
		t.Fatal(err)
	}
	// A 48-byte index header, a 16-byte table header, 40-byte items (end offset, id),
	// and a 40-byte tail (casync's caformat.h).
	const head, item, tail = 48 + 16, 40, 40
	if len(b) < head+tail || (len(b)-head-tail)%item != 0 {
		t.Fatalf("%s: %d bytes, not a blob index", idx, len(b))
	}
	var prev int64
	for r := b[head : len(b)-tail]; len(r) > 0; r = r[item:] {
		end := int64(binary.LittleEndian.Uint64(r))
		ids, sizes = append(ids, [32]byte(r[8:40])), append(sizes, end-prev)
		prev = end
	}
	if prev != int64(len(img)) {
		t.Fatalf("casync's chunks end at %d of %d bytes", prev, len(img))
	}
	return ids, sizes
}

// CasyncReuse is how many bytes of newImg casync takes from a seed holding oldImg:
// the bytes of its chunks that oldImg's chunks include.
func CasyncReuse(t testing.TB, oldImg, newImg []byte) int64 {
	t.Helper()
	old, _ := casyncChunks(t, oldImg)
	have := map[[32]byte]bool{}
	for _, id := range old {
		have[id] = true
	}
	ids, sizes := casyncChunks(t, newImg)
	var n int64
	for i, id := range ids {
		if have[id] {
			n += sizes[i]
		}
	}
	return n
}
