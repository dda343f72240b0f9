package trust

import (
	"strings"
	"testing"

	"github.com/otad/otad/ota"
)

// FuzzParseChain: no input panics, every refusal carries a root code and
// speaks the contract's words, not Go's (docs/contract/trust.md), and
// whatever parses writes back to a document that parses to the same signed part.
func FuzzParseChain(f *testing.F) {
	r, rel := newKeys(f, 2), newKeys(f, 1)
	root := newRoot(f, 3, r, 2, rel, r[0], r[1])
	b, err := root.Marshal()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte("[" + string(b) + "]"))
	for _, s := range []string{``, `null`, `[]`, `{}`, `{"signed":{}}`, `[{"signed":null}]`, `{"signed":{"type":"otad-root","version":1}}`,
		`{"signed":{"version":1.0}}`, `{"signed":{"root":{"keys":[{},{"keyid":5}]}}}`, `[{"signatures":[]},{"signatures":[{"x":1}]}]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		chain, err := ParseChain(in)
		if err != nil {
			if c := ota.CodeOf(err); c != ota.CodeBadRoot && c != ota.CodeRootChainLimit {
				t.Fatalf("refusal without a root code: %v", err)
			}
			if msg := err.Error(); strings.Contains(msg, "cannot unmarshal") || strings.Contains(msg, "Go struct") ||
				strings.Contains(msg, "Go value") || strings.Contains(msg, "json: unknown field") {
				t.Fatalf("a refusal in Go's words: %v", err)
			}
			return
		}
		for _, r := range chain {
			out, err := r.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			back, err := Parse(out)
			if err != nil {
				t.Fatalf("a parsed root does not parse once written: %v\n%s", err, out)
			}
			if !SameSigned(r, back) {
				t.Fatal("written and read back, the signed part changed")
			}
			_ = Anchor(r)
		}
	})
}
