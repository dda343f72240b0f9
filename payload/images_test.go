package payload

import (
	"bytes"
	"testing"

	"github.com/otad/otad/internal/testkit/imagetest"
	"github.com/otad/otad/ota"
)

// TestCDCExt4ShiftedFiles: an ext4 image of the same files with a small file added in
// front (every file moved by a few blocks) reuses at least 95% of the files' bytes
// from the booted slot; fixed chunks reuse almost nothing.
func TestCDCExt4ShiftedFiles(t *testing.T) {
	files := imagetest.Files(60, 3)
	oldImg := imagetest.Ext4(t, imagetest.Tree(t, files, nil), 64<<20)
	newImg := imagetest.Ext4(t, imagetest.Tree(t, files, bytes.Repeat([]byte("a small new file\n"), 700)), 64<<20)
	var unchanged int64
	for _, f := range files {
		unchanged += int64(len(f))
	}
	for _, avg := range []int64{16 << 10, 64 << 10} {
		p, _ := planAgainst(t, oldImg, newImg, Options{Chunking: ota.ChunkingCDC, ChunkSize: avg})
		fixed, _ := planAgainst(t, oldImg, newImg, Options{ChunkSize: avg})
		t.Logf("%d KiB: reused %d of %d unchanged bytes (%.1f%%), fetched %d store bytes; fixed chunks reuse %d",
			avg>>10, p.BootedBytes, unchanged, 100*float64(p.BootedBytes)/float64(unchanged), p.FetchBytes, fixed.BootedBytes)
		if p.BootedBytes < unchanged*95/100 {
			t.Errorf("%d KiB chunks: reused %d of %d unchanged bytes", avg>>10, p.BootedBytes, unchanged)
		}
	}
}

// TestCDCSquashfsReusesWhatCasyncReuses: squashfs compresses and packs without
// alignment; of the same files with one added, the booted slot gives at least what
// casync takes from a seed.
func TestCDCSquashfsReusesWhatCasyncReuses(t *testing.T) {
	files := imagetest.Files(40, 4)
	oldImg := imagetest.Squashfs(t, imagetest.Tree(t, files, nil))
	newImg := imagetest.Squashfs(t, imagetest.Tree(t, files, bytes.Repeat([]byte("a small new file\n"), 700)))
	cas := imagetest.CasyncReuse(t, oldImg, newImg)
	p, _ := planAgainst(t, oldImg, newImg, Options{Chunking: ota.ChunkingCDC})
	t.Logf("squashfs of %d bytes: reused %d, casync %d", len(newImg), p.BootedBytes, cas)
	if p.BootedBytes < cas {
		t.Errorf("reused %d bytes, casync %d", p.BootedBytes, cas)
	}
}
