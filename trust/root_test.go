package trust

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/otad/otad/ota"
)

// doc is a valid signed root as a JSON object, for cases to bend.
func doc(t *testing.T) (map[string]any, *Root) {
	t.Helper()
	r, rel, op := newKeys(t, 2), newKeys(t, 1), newKeys(t, 1)
	root := newRoot(t, 1, r, 1, rel, r[0])
	root.Operator = Role{Threshold: 1, Keys: pubs(op)}
	if _, err := root.Sign(r[0].priv); err != nil {
		t.Fatal(err)
	}
	b, err := root.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m, root
}

func TestParseRefuses(t *testing.T) {
	signed := func(m map[string]any) map[string]any { return m["signed"].(map[string]any) }
	role := func(m map[string]any, name string) map[string]any { return signed(m)[name].(map[string]any) }
	cases := []struct {
		name  string
		bend  func(m map[string]any)
		field string
	}{
		{"unknown top-level field", func(m map[string]any) { m["expires"] = "2030-01-01T00:00:00Z" }, ""},
		{"unknown signed field", func(m map[string]any) { signed(m)["expires"] = 1 }, ""},
		{"no signed part", func(m map[string]any) { delete(m, "signed") }, "signed"},
		{"wrong type", func(m map[string]any) { signed(m)["type"] = "otad-manifest" }, "signed.type"},
		{"version 0", func(m map[string]any) { signed(m)["version"] = 0 }, "signed.version"},
		{"negative version", func(m map[string]any) { signed(m)["version"] = -1 }, "signed.version"},
		{"no release keys", func(m map[string]any) { role(m, "release")["keys"] = []any{} }, "signed.release.keys"},
		{"root threshold above the keys", func(m map[string]any) { role(m, "root")["threshold"] = 3 }, "signed.root.threshold"},
		{"threshold 0", func(m map[string]any) { role(m, "release")["threshold"] = 0 }, "signed.release.threshold"},
		{"operator threshold 0", func(m map[string]any) { role(m, "operator")["threshold"] = 0 }, "signed.operator.threshold"},
		{"keyid not the key's", func(m map[string]any) {
			role(m, "release")["keys"].([]any)[0].(map[string]any)["keyid"] = strings.Repeat("ab", 32)
		}, "signed.release.keys[0].keyid"},
		{"not a PEM key", func(m map[string]any) {
			role(m, "release")["keys"].([]any)[0].(map[string]any)["public_key"] = "nope"
		}, "signed.release.keys[0].public_key"},
		{"a root key as a release key", func(m map[string]any) {
			role(m, "release")["keys"] = []any{role(m, "root")["keys"].([]any)[0]}
		}, "signed.release.keys[0]"},
		{"a key twice in a role", func(m map[string]any) {
			k := role(m, "root")["keys"].([]any)
			role(m, "root")["keys"] = []any{k[0], k[0]}
		}, "signed.root.keys[1]"},
		{"bad signature keyid", func(m map[string]any) { m["signatures"].([]any)[0].(map[string]any)["keyid"] = "xyz" }, "signatures[0].keyid"},
		{"signature not base64", func(m map[string]any) { m["signatures"].([]any)[0].(map[string]any)["sig"] = "!!" }, "signatures[0].sig"},
		{"one key signing twice", func(m map[string]any) { s := m["signatures"].([]any); m["signatures"] = []any{s[0], s[0]} }, "signatures[1].keyid"},
		{"version a string", func(m map[string]any) { signed(m)["version"] = "2" }, "signed.version"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, _ := doc(t)
			c.bend(m)
			b, _ := json.Marshal(m)
			_, err := Parse(b)
			var e *ota.Error
			if err == nil || ota.CodeOf(err) != ota.CodeBadRoot {
				t.Fatalf("Parse = %v, want bad_root", err)
			}
			if c.field != "" {
				if !errorsAs(err, &e) || e.Field != c.field {
					t.Fatalf("Parse = %v, want field %q", err, c.field)
				}
			}
		})
	}
	for name, b := range map[string]string{
		"duplicate key":       `{"signed":{"version":1,"version":2},"signatures":[]}`,
		"duplicate in case":   `{"signed":{},"SIGNED":{},"signatures":[]}`,
		"trailing data":       "", // filled below
		"not JSON":            `{"signed":`,
		"over the size limit": `{"signed":"` + strings.Repeat("a", MaxRootSize) + `"}`,
	} {
		if name == "trailing data" {
			m, _ := doc(t)
			j, _ := json.Marshal(m)
			b = string(j) + `{}`
		}
		if _, err := Parse([]byte(b)); ota.CodeOf(err) != ota.CodeBadRoot {
			t.Errorf("%s: Parse = %v, want bad_root", name, err)
		}
	}
}

func errorsAs(err error, e **ota.Error) bool {
	x, ok := err.(*ota.Error)
	*e = x
	return ok
}

// TestCanonicalForm: what a device verifies is the signed part as parsed,
// not its spelling: whitespace and key order do not break a signature; a
// changed value does.
func TestCanonicalForm(t *testing.T) {
	m, root := doc(t)
	b, _ := json.Marshal(m) // sorted keys, no indentation: another spelling
	got, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := Anchor(got); err != nil {
		t.Fatalf("the same root spelt otherwise: %v", err)
	}
	if !SameSigned(got, root) || got.Operator.Threshold != 1 || len(got.Operator.Keys) != 1 {
		t.Fatal("the parsed root differs from the one written")
	}
	m["signed"].(map[string]any)["version"] = 7
	b, _ = json.Marshal(m)
	changed, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := Anchor(changed); ota.CodeOf(err) != ota.CodeRootSignature {
		t.Fatalf("a changed version still verifies: %v", err)
	}
}

func TestParseChain(t *testing.T) {
	r, rel := newKeys(t, 1), newKeys(t, 1)
	v1, v2 := newRoot(t, 1, r, 1, rel, r[0]), newRoot(t, 2, r, 1, rel, r[0])
	b1, _ := v1.Marshal()
	b2, _ := v2.Marshal()
	chain := []byte("[" + string(b1) + "," + string(b2) + "]")
	got, err := ParseChain(chain)
	if err != nil || len(got) != 2 || got[1].Version != 2 {
		t.Fatalf("ParseChain = %v, %v", got, err)
	}
	one, err := ParseChain(b2)
	if err != nil || len(one) != 1 {
		t.Fatalf("ParseChain(one root) = %v, %v", one, err)
	}
	broken := bytes.Replace(chain, []byte(`"type": "otad-root"`), []byte(`"type": "x"`), 2)
	_, err = ParseChain(broken)
	var e *ota.Error
	if !errorsAs(err, &e) || e.Field != "[0].signed.type" {
		t.Fatalf("ParseChain(broken) = %v, want field [0].signed.type", err)
	}
}
