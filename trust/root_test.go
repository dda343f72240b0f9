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
		{"unknown top-level field", func(m map[string]any) { m["expires"] = "2030-01-01T00:00:00Z" }, "expires"},
		{"unknown signed field", func(m map[string]any) { signed(m)["expires"] = 1 }, "signed.expires"},
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

// TestParseSaysWhatIsWrongWhere: a value of the wrong JSON type and an
// unknown field are refused (bad_root) with the path at fault, indices
// included, and what is wrong in a reader's words (docs/contract/trust.md),
// not Go's ("cannot unmarshal number 1.0 into Go struct field ...", an
// unknown field without its path).
func TestParseSaysWhatIsWrongWhere(t *testing.T) {
	raw := func(s string) json.RawMessage { return json.RawMessage(s) }
	signed := func(m map[string]any) map[string]any { return m["signed"].(map[string]any) }
	role := func(m map[string]any, name string) map[string]any { return signed(m)[name].(map[string]any) }
	key := func(m map[string]any, name string, i int) map[string]any {
		return role(m, name)["keys"].([]any)[i].(map[string]any)
	}
	sig := func(m map[string]any) map[string]any { return m["signatures"].([]any)[0].(map[string]any) }
	cases := []struct {
		name string
		bend func(m map[string]any)
		want string // the whole error text
	}{
		{"version with a fraction", func(m map[string]any) { signed(m)["version"] = raw(`1.0`) },
			`bad_root: signed.version: want a whole number, got 1.0`},
		{"version with an exponent", func(m map[string]any) { signed(m)["version"] = raw(`1e3`) },
			`bad_root: signed.version: want a whole number, got 1e3`},
		{"version in quotes", func(m map[string]any) { signed(m)["version"] = "2" },
			`bad_root: signed.version: want a whole number, got the string "2"`},
		{"negative version", func(m map[string]any) { signed(m)["version"] = -1 },
			`bad_root: signed.version: want a whole number, 0 or more, got -1`},
		{"version over uint64", func(m map[string]any) { signed(m)["version"] = raw(`18446744073709551616`) },
			`bad_root: signed.version: want a whole number, got 18446744073709551616, out of range`},
		{"threshold a boolean", func(m map[string]any) { role(m, "root")["threshold"] = true },
			`bad_root: signed.root.threshold: want a whole number, got true`},
		{"type a number", func(m map[string]any) { signed(m)["type"] = 1 },
			`bad_root: signed.type: want a string, got 1`},
		{"keyid a number, second key", func(m map[string]any) { key(m, "root", 1)["keyid"] = 5 },
			`bad_root: signed.root.keys[1].keyid: want a string, got 5`},
		{"public key an array", func(m map[string]any) { key(m, "release", 0)["public_key"] = []any{} },
			`bad_root: signed.release.keys[0].public_key: want a string, got an array`},
		{"keys an object", func(m map[string]any) { role(m, "operator")["keys"] = map[string]any{} },
			`bad_root: signed.operator.keys: want an array, got an object`},
		{"a key a number", func(m map[string]any) { role(m, "operator")["keys"] = []any{7} },
			`bad_root: signed.operator.keys[0]: want an object, got 7`},
		{"signed an array", func(m map[string]any) { m["signed"] = []any{} },
			`bad_root: signed: want an object, got an array`},
		{"signatures a string", func(m map[string]any) { m["signatures"] = "x" },
			`bad_root: signatures: want an array, got the string "x"`},
		{"sig a number", func(m map[string]any) { sig(m)["sig"] = 0 },
			`bad_root: signatures[0].sig: want a string, got 0`},
		{"unknown top-level field", func(m map[string]any) { m["expires"] = 1 },
			`bad_root: expires: unknown field, want one of signed, signatures`},
		{"unknown signed field", func(m map[string]any) { signed(m)["expires"] = "2030-01-01" },
			`bad_root: signed.expires: unknown field, want one of type, version, root, release, operator`},
		{"misspelt threshold", func(m map[string]any) { role(m, "release")["treshold"] = 1 },
			`bad_root: signed.release.treshold: unknown field, want one of threshold, keys`},
		{"unknown key field, second key", func(m map[string]any) { key(m, "root", 1)["scheme"] = "ed25519" },
			`bad_root: signed.root.keys[1].scheme: unknown field, want one of keyid, public_key`},
		{"unknown signature field", func(m map[string]any) { sig(m)["scheme"] = "ed25519" },
			`bad_root: signatures[0].scheme: unknown field, want one of keyid, sig`},
		{"unknown field inside an unknown field", func(m map[string]any) { signed(m)["meta"] = map[string]any{"a": 1} },
			`bad_root: signed.meta: unknown field, want one of type, version, root, release, operator`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, _ := doc(t)
			c.bend(m)
			b, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			_, err = Parse(b)
			if err == nil || ota.CodeOf(err) != ota.CodeBadRoot || err.Error() != c.want {
				t.Fatalf("Parse = %v\nwant          %s", err, c.want)
			}
			// In a chain, the element's index leads the path.
			m, _ = doc(t)
			good, _ := json.Marshal(m)
			_, err = ParseChain([]byte("[" + string(good) + "," + string(b) + "]"))
			want := strings.Replace(c.want, "bad_root: ", "bad_root: [1].", 1)
			if err == nil || err.Error() != want {
				t.Fatalf("ParseChain = %v\nwant               %s", err, want)
			}
		})
	}
	for in, want := range map[string]string{
		`[]`:                         `bad_root: not a root document: want an object, got an array`,
		`"otad-root"`:                `bad_root: not a root document: want an object, got the string "otad-root"`,
		`{"SIGNED":{"x":1}}`:         `bad_root: SIGNED.x: unknown field, want one of type, version, root, release, operator`,
		`{"signed":{"Version":1.5}}`: `bad_root: signed.Version: want a whole number, got 1.5`,
		`{"signed":{"a.b\n":1}}`:     `bad_root: signed."a.b\n": unknown field, want one of type, version, root, release, operator`,
		`{"":1}`:                     `bad_root: "": unknown field, want one of signed, signatures`,
	} {
		if _, err := Parse([]byte(in)); err == nil || err.Error() != want {
			t.Errorf("Parse(%s) = %v\nwant %s", in, err, want)
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
