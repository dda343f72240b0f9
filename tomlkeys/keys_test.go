package tomlkeys

import (
	"slices"
	"testing"

	"github.com/pelletier/go-toml/v2/unstable"
)

func TestWritten(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		want       []Key
	}{
		{"tables and dotted keys", "a = 1\n[Slots]\nb.c = \"x\"\n", []Key{
			{"a", 1, unstable.Integer}, {"Slots.b.c", 3, unstable.String}}},
		{"array tables numbered as go-toml matches them", "[[wave]]\npercent = 1\n[[Wave]]\npercent = 2\n[halt]\nx = true\n", []Key{
			{"wave[1].percent", 2, unstable.Integer}, {"Wave[2].percent", 4, unstable.Integer}, {"halt.x", 6, unstable.Bool}}},
		{"inline tables, alone and in an array", "h = {a = 1, b = {c = 2.5}}\nw = [1, {p = \"q\"}, {p = 3}]\n", []Key{
			{"h", 1, unstable.InlineTable}, {"h.a", 1, unstable.Integer}, {"h.b", 1, unstable.InlineTable}, {"h.b.c", 1, unstable.Float},
			{"w", 2, unstable.Array}, {"w[1].p", 2, unstable.String}, {"w[2].p", 2, unstable.Integer}}},
		{"what was read before a syntax error", "a = 1\nb = \nc = 2\n", []Key{{"a", 1, unstable.Integer}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Written([]byte(tc.file)); !slices.Equal(got, tc.want) {
				t.Errorf("got %v\nwant %v", got, tc.want)
			}
		})
	}
}

func TestKindWords(t *testing.T) {
	for kind, want := range map[string]string{
		"string": "a string", "integer": "a whole number", "float": "a number with a fraction",
		"bool": "true or false", "boolean": "true or false", "array": "a list", "table": "a table", "inline": "a table",
		"datetime": "a datetime",
	} {
		if got := KindWords(kind); got != want {
			t.Errorf("KindWords(%q) = %q, want %q", kind, got, want)
		}
	}
}

// FuzzWritten: any file gives keys with a name and a line, never a panic.
func FuzzWritten(f *testing.F) {
	f.Add([]byte("a = 1\n[[w]]\nb = {c = [{d = 1}]}\n"))
	f.Add([]byte("[t\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, k := range Written(data) {
			if k.Line < 1 {
				t.Fatalf("%q: line %d", k.Name, k.Line)
			}
		}
	})
}
