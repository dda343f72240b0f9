package statelock

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Issue 9: a lock file planted as a symlink is not followed (the old code
// truncated its target), and a state directory others can write is refused.
func TestHostileStateDir(t *testing.T) {
	t.Run("symlinked lock", func(t *testing.T) {
		dir := t.TempDir()
		victim := filepath.Join(t.TempDir(), "victim")
		if err := os.WriteFile(victim, []byte("precious\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(victim, filepath.Join(dir, "lock")); err != nil {
			t.Fatal(err)
		}
		if l, err := Acquire(dir); err == nil {
			l.Release()
			t.Fatal("took a lock through a planted symlink")
		}
		if b, _ := os.ReadFile(victim); string(b) != "precious\n" {
			t.Fatalf("symlink target changed to %q", b)
		}
	})
	for _, mode := range []os.FileMode{0o777, 0o770, 0o1777} {
		t.Run("mode "+mode.String(), func(t *testing.T) {
			dir := t.TempDir()
			if err := os.Chmod(dir, mode); err != nil {
				t.Fatal(err)
			}
			l, err := Acquire(dir)
			if err == nil {
				l.Release()
				t.Fatalf("accepted a state directory of mode %v", mode)
			}
			if !strings.Contains(err.Error(), "writable by others") || !strings.Contains(err.Error(), "chmod") {
				t.Fatalf("error %q does not say what is wrong and how to fix it", err)
			}
		})
	}
}
