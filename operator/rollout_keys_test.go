package operator

import (
	"crypto"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/otad/otad/internal/cli"
	"github.com/otad/otad/trust"
	"github.com/otad/otad/verify"
)

// TestOperatorKeysFromRoot: --trust root.json takes the operator role only
// of a root a device would take (signed by a threshold of its own root
// keys) and whose operator threshold one signature meets
// (docs/contract/rollouts.md); anything else is a usage error (exit 2).
func TestOperatorKeysFromRoot(t *testing.T) {
	gen := func() crypto.Signer {
		s, err := verify.GenerateKey(verify.KeyEd25519)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	key := func(s crypto.Signer) verify.Key {
		id, err := verify.KeyID(s.Public())
		if err != nil {
			t.Fatal(err)
		}
		return verify.Key{ID: id, Public: s.Public()}
	}
	rk, rel, op1, op2 := gen(), gen(), gen(), gen()
	dir := t.TempDir()
	write := func(name string, ops []crypto.Signer, threshold int, signers ...crypto.Signer) string {
		r := &trust.Root{Version: 1, Root: trust.Role{Threshold: 1, Keys: []verify.Key{key(rk)}}, Release: trust.Role{Threshold: 1, Keys: []verify.Key{key(rel)}}}
		for _, o := range ops {
			r.Operator.Keys = append(r.Operator.Keys, key(o))
		}
		r.Operator.Threshold = threshold
		for _, s := range signers {
			if _, err := r.Sign(s); err != nil {
				t.Fatal(err)
			}
		}
		b, err := r.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		name string
		path string
		keys int
		want string // in the usage error; "" for none
	}{
		{"signed", write("signed.json", []crypto.Signer{op1, op2}, 1, rk), 2, ""},
		{"unsigned", write("unsigned.json", []crypto.Signer{op1}, 1), 0, "root_signature"},
		{"signed by another key", write("stranger.json", []crypto.Signer{op1}, 1, rel), 0, "root_signature"},
		{"operator threshold 2", write("two.json", []crypto.Signer{op1, op2}, 2, rk), 0, "operator threshold of 1"},
		{"no operator role", write("none.json", nil, 0, rk), 0, "no operator role"},
	} {
		t.Run(c.name, func(t *testing.T) {
			keys, err := operatorKeys(c.path)
			if c.want == "" {
				if err != nil || len(keys) != c.keys {
					t.Fatalf("%d keys, %v; want %d keys", len(keys), err, c.keys)
				}
				return
			}
			if !errors.As(err, new(cli.UsageError)) || !strings.Contains(err.Error(), c.want) || keys != nil {
				t.Fatalf("%d keys, %v; want a usage error saying %q", len(keys), err, c.want)
			}
		})
	}
}
