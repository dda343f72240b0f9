package ext4_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/otad/otad/internal/testkit/imagetest"
	"github.com/otad/otad/payload/ext4"
)

// TestReadFindsEveryFilesBytes: on an image mkfs.ext4 -d made, every regular file of
// the tree is listed under its path, with its size, and its extents read from the
// image are its bytes exactly (nested directories, a directory large enough for an
// htree index, an empty file, a file with a hole).
func TestReadFindsEveryFilesBytes(t *testing.T) {
	files := imagetest.Files(24, 3)
	dir := imagetest.Tree(t, files, nil)
	want := map[string][]byte{}
	walk(t, dir, want)
	deep := filepath.Join(dir, "a", "b", "c")
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	add := func(p string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, p), b, 0o644); err != nil {
			t.Fatal(err)
		}
		want["/"+filepath.ToSlash(p)] = b
	}
	add("a/b/c/deep", []byte("deep file"))
	add("a/empty", nil)
	add("a/sparse", append(make([]byte, 1<<20), []byte("after a hole")...))
	if err := os.MkdirAll(filepath.Join(dir, "many"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 400 { // past one block of entries: an htree directory
		add(fmt.Sprintf("many/a-rather-long-file-name-%04d", i), []byte(fmt.Sprint(i)))
	}
	img := imagetest.Ext4(t, dir, 64<<20)
	got, err := ext4.Read(bytes.NewReader(img), int64(len(img)))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Errorf("%d files, want %d", len(got), len(want))
	}
	for _, f := range got {
		w, ok := want[f.Path]
		if !ok {
			t.Errorf("%s listed, not in the tree", f.Path)
			continue
		}
		b := make([]byte, f.Size)
		for _, x := range f.Extents {
			copy(b[x.Logical:], img[x.Physical:x.Physical+x.Len])
		}
		if f.Size != int64(len(w)) || !bytes.Equal(b, w) {
			t.Errorf("%s: %d bytes read from its extents, not its %d bytes", f.Path, f.Size, len(w))
		}
	}
}

func walk(t *testing.T, dir string, into map[string][]byte) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		into["/"+filepath.ToSlash(rel)] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestReadRefusesWhatIsNotExt4: a squashfs image, zeros and a truncated ext4 image are
// refused, never listed.
func TestReadRefusesWhatIsNotExt4(t *testing.T) {
	dir := imagetest.Tree(t, imagetest.Files(4, 1), nil)
	img := imagetest.Ext4(t, dir, 16<<20)
	for _, c := range []struct {
		name string
		img  []byte
	}{
		{"squashfs", imagetest.Squashfs(t, dir)},
		{"zeros", make([]byte, 1<<20)},
		{"truncated", img[:8192]},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs, err := ext4.Read(bytes.NewReader(c.img), int64(len(c.img)))
			if err == nil {
				t.Fatalf("read %d files", len(fs))
			}
			if c.name != "truncated" && !errors.Is(err, ext4.ErrNotExt4) {
				t.Errorf("%v, want ErrNotExt4", err)
			}
		})
	}
}

// FuzzRead: any bytes are refused or read without a panic, and what is read lies
// inside the image.
func FuzzRead(f *testing.F) {
	dir := imagetest.Tree(f, [][]byte{[]byte("one"), bytes.Repeat([]byte("two "), 3000)}, nil)
	img := imagetest.Ext4(f, dir, 512<<10)
	f.Add(img)
	f.Fuzz(func(t *testing.T, b []byte) {
		fs, err := ext4.Read(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		for _, x := range fs {
			for _, e := range x.Extents {
				if e.Physical < 0 || e.Len < 1 || e.Physical+e.Len > int64(len(b)) {
					t.Fatalf("%s: extent %+v outside the %d bytes", x.Path, e, len(b))
				}
			}
		}
	})
}
