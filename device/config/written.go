package config

import (
	"github.com/pelletier/go-toml/v2/unstable"
)

// written is a key as the file spells it, where it stands and what kind of
// value it holds: go-toml matches keys case-insensitively and does not say
// where a TextUnmarshaler's error arose, so these are read from the file.
type written struct {
	key  []string
	line int
	kind unstable.Kind
}

// writtenKeys lists every key the file sets, tables' names prefixed (no
// array tables: the config has none). A file that does not parse gives what
// was read before the error; the decoder names that error.
func writtenKeys(data []byte) []written {
	var p unstable.Parser
	p.Reset(data)
	var out []written
	var table []string
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.Table, unstable.ArrayTable:
			table = keyParts(e.Key())
		case unstable.KeyValue:
			out = appendKeyValue(&p, out, table, e)
		}
	}
	return out
}

// appendKeyValue adds kv under prefix, and the keys of an inline table it holds.
func appendKeyValue(p *unstable.Parser, out []written, prefix []string, kv *unstable.Node) []written {
	key := append(append([]string(nil), prefix...), keyParts(kv.Key())...)
	v := kv.Value()
	out = append(out, written{key: key, line: p.Shape(kv.Raw).Start.Line, kind: v.Kind})
	if v.Kind == unstable.InlineTable {
		for it := v.Children(); it.Next(); {
			if n := it.Node(); n.Kind == unstable.KeyValue {
				out = appendKeyValue(p, out, key, n)
			}
		}
	}
	return out
}

func keyParts(it unstable.Iterator) []string {
	var parts []string
	for it.Next() {
		parts = append(parts, string(it.Node().Data))
	}
	return parts
}
