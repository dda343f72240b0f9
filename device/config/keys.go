package config

import (
	"reflect"
	"regexp"
	"strings"

	"github.com/otad/otad/tomlkeys"
)

// knownKeys are the dotted keys a config may hold, from the toml tags of
// Config: a typo'd key is answered with the nearest of them.
func knownKeys() []string {
	var keys []string
	walkKeys(func(key string, _ reflect.Type) { keys = append(keys, key) })
	return keys
}

// durationKeys are the known keys that hold a Duration, lower-cased (as
// go-toml matches them).
func durationKeys() map[string]bool {
	m := map[string]bool{}
	walkKeys(func(key string, t reflect.Type) {
		if t == reflect.TypeFor[Duration]() {
			m[strings.ToLower(key)] = true
		}
	})
	return m
}

// walkKeys calls fn with every dotted key of Config's toml tags and its type.
func walkKeys(fn func(key string, t reflect.Type)) {
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for f := range t.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
			if name == "" || name == "-" {
				continue
			}
			ft := f.Type
			if ft.Kind() == reflect.Struct && ft != reflect.TypeFor[Duration]() {
				walk(ft, prefix+name+".")
				continue
			}
			fn(prefix+name, ft)
		}
	}
	walk(reflect.TypeFor[Config](), "")
}

// didYouMean is ` (did you mean "compatible"?)` for a key one or two edits
// from a known one, and "" when none is that close.
func didYouMean(key string) string {
	best, bestD := "", 3
	for _, k := range knownKeys() {
		if d := editDistance(key, k); d < bestD {
			best, bestD = k, d
		}
	}
	if best == "" {
		return ""
	}
	return ` (did you mean "` + best + `"?)`
}

// editDistance is Levenshtein's distance between a and b, in bytes (keys are ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// decodeInto matches go-toml's "cannot decode TOML string into struct field
// config.Trust.Threshold of type int" (or "into a int").
var decodeInto = regexp.MustCompile(`cannot decode TOML (\w+) into (?:struct field \S+ of type |a |an )?(\S+)`)

// plainType says what a key wants and what it got in words a config's
// writer uses ("a number, not a string (write 2, not "2")"), not go-toml's
// Go types.
func plainType(msg string) string {
	m := decodeInto.FindStringSubmatch(msg)
	if m == nil {
		return msg
	}
	got, want := m[1], goTypeWords(m[2])
	s := want + ", not " + tomlkeys.KindWords(got)
	if got == "string" && (strings.HasPrefix(want, "a whole number") || want == "true or false") {
		s += " (leave out the quotes)"
	}
	return s
}

func goTypeWords(t string) string {
	t = strings.TrimPrefix(t, "*")
	switch {
	case strings.HasPrefix(t, "[]"):
		return "a list [...]"
	case strings.HasPrefix(t, "int") || strings.HasPrefix(t, "uint"):
		return "a whole number"
	case strings.HasPrefix(t, "float"):
		return "a number"
	case t == "bool":
		return "true or false"
	case t == "string" || strings.HasSuffix(t, "Duration"):
		return `a string in quotes`
	case strings.HasPrefix(t, "map") || strings.HasPrefix(t, "config."):
		return "a table"
	}
	return "a " + t
}
