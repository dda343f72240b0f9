package node

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/otad/otad/device/config"
)

// slots.B reaching slots.A by another path is named: every install into it
// would fail (docs/contract/config.md, slots).
func TestSlotProblemsSameDevice(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"a", "b"} {
		if err := os.WriteFile(filepath.Join(dir, f), make([]byte, 4096), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(dir, "a"), filepath.Join(dir, "a-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(dir, "a"), filepath.Join(dir, "a-hard")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, a, b string
		same       bool
	}{
		{"two files", "a", "b", false},
		{"a symlink to A", "a", "a-link", true},
		{"A through a dot-dot", "a", "../" + filepath.Base(dir) + "/a", true},
		{"a hard link to A", "a", "a-hard", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := &config.Config{Path: "otad.toml", Slots: config.Slots{A: filepath.Join(dir, c.a), B: dir + "/" + c.b}}
			var named bool
			for _, p := range SlotProblems(cfg) {
				named = named || (p.Key == "slots.B" && strings.Contains(p.Err.Error(), "same device as slots.A"))
			}
			if named != c.same {
				t.Fatalf("slots.B named as slots.A: %v, want %v: %v", named, c.same, SlotProblems(cfg))
			}
		})
	}
}
