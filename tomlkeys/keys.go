// Package tomlkeys reads where a TOML file sets each key, and says TOML's
// kinds in the words of the person who wrote the file. go-toml's decoder
// matches keys case-insensitively and names neither a key's line nor, for
// a value's own parser's error, its key: otad.toml's and a rollout plan's
// errors take both from here (docs/contract/config.md, rollouts.md).
package tomlkeys

import (
	"fmt"
	"strings"

	"github.com/pelletier/go-toml/v2/unstable"
)

// Key is a key the file sets.
type Key struct {
	// Name is the key as written, dotted under its table's name. The
	// tables of an array and the inline tables of an array value are
	// numbered from 1 as errors name them: wave[2].percent is the percent
	// of the second [[wave]], or of wave = [{...}, {percent = 10}].
	Name string
	Line int
	Kind unstable.Kind
}

// Written lists every key the file sets, in the file's order. A file that
// does not parse gives what was read before the error: the decoder names
// that error.
func Written(data []byte) []Key {
	var p unstable.Parser
	p.Reset(data)
	var out []Key
	arrays := map[string]int{} // [[x]] seen so far, by x as go-toml matches it
	var table string
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.Table:
			table = name("", e.Key())
		case unstable.ArrayTable:
			k := name("", e.Key())
			arrays[strings.ToLower(k)]++
			table = fmt.Sprintf("%s[%d]", k, arrays[strings.ToLower(k)])
		case unstable.KeyValue:
			out = appendKey(&p, out, table, e)
		}
	}
	return out
}

// appendKey adds kv under prefix, and the keys of the inline tables it
// holds, directly or in an array.
func appendKey(p *unstable.Parser, out []Key, prefix string, kv *unstable.Node) []Key {
	k := name(prefix, kv.Key())
	v := kv.Value()
	out = append(out, Key{Name: k, Line: p.Shape(kv.Raw).Start.Line, Kind: v.Kind})
	switch v.Kind {
	case unstable.InlineTable:
		out = appendTable(p, out, k, v)
	case unstable.Array:
		i := 0
		for it := v.Children(); it.Next(); {
			if n := it.Node(); n.Kind == unstable.InlineTable {
				i++
				out = appendTable(p, out, fmt.Sprintf("%s[%d]", k, i), n)
			}
		}
	}
	return out
}

func appendTable(p *unstable.Parser, out []Key, prefix string, table *unstable.Node) []Key {
	for it := table.Children(); it.Next(); {
		if n := it.Node(); n.Kind == unstable.KeyValue {
			out = appendKey(p, out, prefix, n)
		}
	}
	return out
}

// name is a dotted key (a.b.c) under prefix.
func name(prefix string, it unstable.Iterator) string {
	parts := []string{}
	if prefix != "" {
		parts = append(parts, prefix)
	}
	for it.Next() {
		parts = append(parts, string(it.Node().Data))
	}
	return strings.Join(parts, ".")
}

// KindWords is a TOML kind as go-toml's errors name it ("integer",
// "inline") in a file writer's words ("a whole number", "a table").
func KindWords(kind string) string {
	switch kind {
	case "integer":
		return "a whole number"
	case "float":
		return "a number with a fraction"
	case "boolean", "bool":
		return "true or false"
	case "array":
		return "a list"
	case "table", "inline":
		return "a table"
	}
	return "a " + kind
}
