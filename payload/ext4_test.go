package payload

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/otad/otad/ota"
)

// mkfsExt4 makes an ext4 image of size bytes holding dir's files, reproducibly: fixed
// UUID and hash seed, no timestamps from the clock.
func mkfsExt4(t testing.TB, dir string, size int64) []byte {
	t.Helper()
	img := filepath.Join(t.TempDir(), "fs.img")
	cmd := exec.Command("mkfs.ext4", "-q", "-F", "-b", "4096", "-d", dir,
		"-U", "2c3a6f9e-4b7d-4c1e-9a55-0d7f3b2e8c41", "-E", "hash_seed=2c3a6f9e-4b7d-4c1e-9a55-0d7f3b2e8c41,lazy_itable_init=0,root_owner=0:0",
		img, fmt.Sprint(size/1024)+"k")
	cmd.Env = append(os.Environ(), "E2FSPROGS_FAKE_TIME=1700000000")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	b, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// writeTree writes files into dir as f000, f001, ... (and extra, first in order).
func writeTree(t testing.TB, dir string, files []fsFile, extra []byte) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if extra != nil {
		if err := os.WriteFile(filepath.Join(dir, "a-new"), extra, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i, f := range files {
		sub := filepath.Join(dir, fmt.Sprintf("d%d", i%4))
		os.MkdirAll(sub, 0o755)
		if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%03d", i)), f.data, 0o644); err != nil {
			t.Fatal(err)
		}
		os.Chtimes(filepath.Join(sub, fmt.Sprintf("f%03d", i)), fixedTime, fixedTime)
	}
}

func TestExt4ShiftedFiles(t *testing.T) {
	files := makeFiles(80, 3)
	root := t.TempDir()
	writeTree(t, filepath.Join(root, "old"), files, nil)
	writeTree(t, filepath.Join(root, "new"), files, bytes.Repeat([]byte("a small new file\n"), 700))
	oldImg := mkfsExt4(t, filepath.Join(root, "old"), 96<<20)
	newImg := mkfsExt4(t, filepath.Join(root, "new"), 96<<20)
	var unchanged int64
	for _, f := range files {
		unchanged += int64(len(f.data))
	}
	for _, avg := range []int64{16 << 10, 64 << 10} {
		p, _ := planAgainst(t, oldImg, newImg, Options{Chunking: ota.ChunkingCDC, ChunkSize: avg})
		t.Logf("avg %d: reused %d of %d unchanged bytes (%.1f%%), fetched %d store bytes", avg, p.BootedBytes, unchanged, 100*float64(p.BootedBytes)/float64(unchanged), p.FetchBytes)
	}
}

var fixedTime = time.Unix(1700000000, 0)

func mksquashfs(t testing.TB, dir string) []byte {
	t.Helper()
	img := filepath.Join(t.TempDir(), "fs.sqfs")
	if out, err := exec.Command("mksquashfs", dir, img, "-quiet", "-noappend", "-no-progress", "-mkfs-time", "0", "-all-time", "0", "-all-root").CombinedOutput(); err != nil {
		t.Fatalf("mksquashfs: %v: %s", err, out)
	}
	b, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSquashfsShifted(t *testing.T) {
	files := makeFiles(80, 3)
	root := t.TempDir()
	writeTree(t, filepath.Join(root, "old"), files, nil)
	writeTree(t, filepath.Join(root, "new"), files, bytes.Repeat([]byte("a small new file\n"), 700))
	oldImg := mksquashfs(t, filepath.Join(root, "old"))
	newImg := mksquashfs(t, filepath.Join(root, "new"))
	cas := casyncReuse(t, oldImg, newImg)
	p, _ := planAgainst(t, oldImg, newImg, Options{Chunking: ota.ChunkingCDC, ChunkSize: 64 << 10})
	t.Logf("squashfs %d bytes: reused %d, casync %d", len(newImg), p.BootedBytes, cas)
}
