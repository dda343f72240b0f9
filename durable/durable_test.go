package durable

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteFileReplacesWhole(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f.json")
	for _, content := range []string{"first", "second, longer", "3"} {
		if err := WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(p)
		if err != nil || string(got) != content {
			t.Fatalf("read %q, %v; want %q", got, err, content)
		}
	}
	st, err := os.Stat(p)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, %v", st.Mode(), err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("temp files left behind: %v", entries)
	}
	if err := Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := Remove(p); err != nil {
		t.Fatalf("removing a missing file: %v", err)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatalf("still there: %v", err)
	}
}

func TestWriteFileMissingDir(t *testing.T) {
	if err := WriteFile(filepath.Join(t.TempDir(), "no", "f"), []byte("x"), 0o600); err == nil {
		t.Fatal("no error for a missing directory")
	}
}

// opsFS records what WriteFileOn asks of its file system.
type opsFS struct {
	OS
	ops []string
}

type opsFile struct {
	File
	fs *opsFS
}

func (f *opsFS) CreateTemp(dir, pattern string) (File, error) {
	t, err := f.OS.CreateTemp(dir, pattern)
	f.ops = append(f.ops, "create")
	return opsFile{t, f}, err
}
func (f *opsFS) Rename(a, b string) error { f.ops = append(f.ops, "rename"); return f.OS.Rename(a, b) }
func (f *opsFS) SyncDir(d string) error   { f.ops = append(f.ops, "syncdir"); return f.OS.SyncDir(d) }
func (f *opsFS) Remove(n string) error    { f.ops = append(f.ops, "remove"); return f.OS.Remove(n) }
func (f opsFile) Write(b []byte) (int, error) {
	f.fs.ops = append(f.fs.ops, "write")
	return f.File.Write(b)
}
func (f opsFile) Sync() error { f.fs.ops = append(f.fs.ops, "sync"); return f.File.Sync() }

// The order is the crash-safety argument: the data is synced before the
// rename, and the rename is synced (its directory) before WriteFileOn returns.
func TestWriteFileOnOrder(t *testing.T) {
	fsys := &opsFS{}
	p := filepath.Join(t.TempDir(), "f")
	if err := WriteFileOn(fsys, p, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := RemoveOn(fsys, p); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(fsys.ops, " "), "create write sync rename syncdir remove syncdir"; got != want {
		t.Fatalf("ops %q, want %q", got, want)
	}
}
