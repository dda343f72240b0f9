// Package imagetest makes the root file system images of an update at test time: a
// tree of files, the same tree after an update's kind of changes, and ext4 (mkfs.ext4
// -d) or squashfs (mksquashfs) images of them, reproducibly; and it asks casync how
// much of one image it would take from another, the peer chunked payloads are
// weighed against.
package imagetest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/otad/otad/internal/testkit/testtool"
)

// Files is n files of 4 KiB to 1 MiB from seed, every other one random bytes, the
// rest text-like (compressible).
func Files(n int, seed uint64) [][]byte {
	rng := rand.New(rand.NewPCG(seed, 7))
	words := []string{"otad ", "chunk ", "delta ", "slot ", "image ", "boot ", "update ", "\n"}
	files := make([][]byte, n)
	for i := range files {
		size := 4<<10 + rng.IntN(1<<20)
		b := make([]byte, 0, size+16)
		if i%2 == 0 {
			for len(b) < size {
				b = binary.LittleEndian.AppendUint64(b, rng.Uint64())
			}
		} else {
			for len(b) < size {
				b = append(b, words[rng.IntN(len(words))]...)
			}
		}
		files[i] = b[:size]
	}
	return files
}

// Updated is files after an update's kind of changes, from seed: every seventh file,
// from the second, with a few bytes changed; from the fourth, a longer version (bytes
// inserted); the sixth replaced by other bytes.
func Updated(files [][]byte, seed uint64) [][]byte {
	rng := rand.New(rand.NewPCG(seed, 11))
	out := make([][]byte, len(files))
	for i, f := range files {
		b := bytes.Clone(f)
		switch i % 7 {
		case 1:
			for range 3 {
				b[rng.IntN(len(b))] ^= 0x5a
			}
		case 3:
			at := rng.IntN(len(b))
			b = append(b[:at:at], append(bytes.Repeat([]byte("inserted "), 40), b[at:]...)...)
		case 5:
			if i == 5 {
				for j := range b {
					b[j] = byte(rng.Uint32())
				}
			}
		}
		out[i] = b
	}
	return out
}

// fixed is every file's time, so that images of the same files are the same.
var fixed = time.Unix(1700000000, 0)

// Tree writes files into a new directory as d<i%4>/f<i>, with extra (when not nil)
// as a-new, first in order, and returns the directory.
func Tree(t testing.TB, files [][]byte, extra []byte) string {
	t.Helper()
	dir := t.TempDir()
	write := func(path string, b []byte) {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, fixed, fixed); err != nil {
			t.Fatal(err)
		}
	}
	if extra != nil {
		write(filepath.Join(dir, "a-new"), extra)
	}
	for i, f := range files {
		write(filepath.Join(dir, fmt.Sprintf("d%d", i%4), fmt.Sprintf("f%03d", i)), f)
	}
	return dir
}

// Ext4 is an ext4 image of size bytes holding dir's files, reproducible: a fixed UUID
// and hash seed, and the clock fixed.
func Ext4(t testing.TB, dir string, size int64) []byte {
	t.Helper()
	mkfs := testtool.Require(t, "mkfs.ext4", "e2fsprogs")
	img := filepath.Join(t.TempDir(), "fs.img")
	const uuid = "2c3a6f9e-4b7d-4c1e-9a55-0d7f3b2e8c41"
	cmd := exec.Command(mkfs, "-q", "-F", "-b", "4096", "-d", dir, "-U", uuid,
		"-E", "hash_seed="+uuid+",lazy_itable_init=0,root_owner=0:0", img, fmt.Sprint(size/1024)+"k")
	cmd.Env = append(os.Environ(), "E2FSPROGS_FAKE_TIME=1700000000")
	return run(t, cmd, img)
}

// Squashfs is a squashfs image of dir's files, reproducible.
func Squashfs(t testing.TB, dir string) []byte {
	t.Helper()
	mk := testtool.Require(t, "mksquashfs", "squashfs-tools")
	img := filepath.Join(t.TempDir(), "fs.sqfs")
	return run(t, exec.Command(mk, dir, img, "-quiet", "-noappend", "-no-progress", "-mkfs-time", "0", "-all-time", "0", "-all-root"), img)
}

func run(t testing.TB, cmd *exec.Cmd, img string) []byte {
	t.Helper()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", cmd.Path, err, out)
	}
	b, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
