package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A name a topic cannot carry on every broker is refused at load time with
// the key named: never a device that connects and silently gets nothing.
func TestNamesRefusedWithTheKey(t *testing.T) {
	bad := []struct{ what, v string }{
		{"dot", "gw.1"},
		{"slash", "gw/1"},
		{"plus", "gw+1"},
		{"hash", "gw#1"},
		{"space", "gw 1"},
		{"non-ASCII", "gw-ü1"},
		{"colon", "gw:1"},
		{"NUL", "gw\x001"},
		{"too long", strings.Repeat("a", 129)},
	}
	place := []struct {
		key  string
		toml func(v string) string
	}{
		{"device_id", func(v string) string { return strings.Replace(minimal, `"gw-0001"`, quote(v), 1) }},
		{"mqtt.groups[2]", func(v string) string {
			return minimal + "\n[mqtt]\nbroker = \"mqtt://h:1883\"\ngroups = [\"a\", \"b\", " + quote(v) + "]\n"
		}},
		{"mqtt.topic_prefix", func(v string) string { return minimal + "\n[mqtt]\ntopic_prefix = " + quote(v) + "\n" }},
	}
	for _, p := range place {
		for _, b := range bad {
			t.Run(p.key+"/"+b.what, func(t *testing.T) {
				_, err := Parse([]byte(p.toml(b.v)), "/etc/otad/otad.toml", "")
				if err == nil {
					t.Fatalf("%q accepted as %s", b.v, p.key)
				}
				if want := "/etc/otad/otad.toml: " + p.key + ": "; !strings.Contains(err.Error(), want) {
					t.Fatalf("error %q does not name %q", err, want)
				}
			})
		}
	}
	for _, ok := range []string{"gw-0001", "A_b-9", strings.Repeat("z", 128), "0123456789abcdef0123456789abcdef"} {
		if _, err := Parse([]byte(place[0].toml(ok)+"\n[mqtt]\ngroups = [\""+ok+"\"]\n"), "otad.toml", ""); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
}

// The machine ID stands in for device_id: what it holds is checked too.
func TestMachineIDChecked(t *testing.T) {
	noID := strings.Replace(minimal, `device_id = "gw-0001"`, "", 1)
	mid := filepath.Join(t.TempDir(), "machine-id")
	if err := os.WriteFile(mid, []byte("not a.valid id\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Parse([]byte(noID), "otad.toml", mid)
	if err == nil || !strings.Contains(err.Error(), "device_id: not set, and the machine ID from "+mid) {
		t.Fatalf("error %v: want device_id naming %s", err, mid)
	}
}

// quote makes v a TOML basic string (TOML escapes as JSON does for these).
func quote(v string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\x00", `\u0000`).Replace(v) + `"`
}
