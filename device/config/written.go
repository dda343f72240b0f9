package config

import (
	"fmt"
	"strings"

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

// miscased names every key written in another case than its documented
// spelling (Compatible, [Slots] a): go-toml matches keys case-insensitively,
// so such a key would override or sit beside the real one unseen, where a
// key otad does not know is an error (docs/contract/config.md).
func miscased(data []byte, path string) []error {
	spelling := map[string]string{} // lower-cased: the documented spelling
	for _, k := range knownKeys() {
		parts := strings.Split(k, ".")
		for i := range parts {
			p := strings.Join(parts[:i+1], ".")
			spelling[strings.ToLower(p)] = p
		}
	}
	var errs []error
	for _, w := range writtenKeys(data) {
		key := strings.Join(w.key, ".")
		if known, ok := spelling[strings.ToLower(key)]; ok && known != key {
			errs = append(errs, &Error{Path: path, Key: key,
				Msg: fmt.Sprintf("line %d: unknown key: keys are case-sensitive, the key is %q", w.line, known)})
		}
	}
	return errs
}
