package statelock

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// Check says whether Acquire could make the state directory, as otad run
// would, and leaves nothing behind (docs/contract/config.md, state_dir).
func TestCheckCreatable(t *testing.T) {
	base := t.TempDir()
	file := filepath.Join(base, "afile")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, dir string
		ok        bool
	}{
		{"missing, its parent there", filepath.Join(base, "x", "y", "state"), true},
		{"a regular file", file, false},
		{"under a regular file", filepath.Join(file, "state"), false},
		{"under /proc", "/proc/otad-state-check", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := Check(c.dir)
			if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrNoDir)) {
				t.Fatalf("Check(%s) = %v, want ok %v (or ErrNoDir)", c.dir, err, c.ok)
			}
			if ents, _ := os.ReadDir(base); len(ents) != 1 {
				t.Fatalf("Check left %d entries in %s", len(ents), base)
			}
		})
	}
}
