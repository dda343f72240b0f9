package device

import (
	"crypto"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/otad/otad/internal/testkit/clitest"
	"github.com/otad/otad/internal/testkit/devicetest"
	"github.com/otad/otad/trust"
	"github.com/otad/otad/verify"
)

// rootDoc writes root version v (root keys rk, threshold 1; release key
// rel) signed by signers, and returns its path.
func rootDoc(t *testing.T, dir string, v uint64, rk, rel crypto.Signer, signers ...crypto.Signer) string {
	t.Helper()
	key := func(s crypto.Signer) verify.Key {
		id, err := verify.KeyID(s.Public())
		devicetest.Must(t, err)
		return verify.Key{ID: id, Public: s.Public()}
	}
	r := &trust.Root{Version: v, Root: trust.Role{Threshold: 1, Keys: []verify.Key{key(rk)}}, Release: trust.Role{Threshold: 1, Keys: []verify.Key{key(rel)}}}
	for _, s := range signers {
		_, err := r.Sign(s)
		devicetest.Must(t, err)
	}
	b, err := r.Marshal()
	devicetest.Must(t, err)
	p := filepath.Join(dir, "root-"+string(rune('0'+v))+".json")
	devicetest.Must(t, os.WriteFile(p, b, 0o644))
	return p
}

// otad trust update: in-process when no daemon runs; a root taken once is
// not taken again (exit 3, nothing changed); one signed by a stranger is
// refused by name; a device without a root says so.
func TestTrustUpdate(t *testing.T) {
	tb := devicetest.New(t, devicetest.Options{Policy: "manual"})
	gen := func() crypto.Signer {
		s, err := verify.GenerateKey(verify.KeyEd25519)
		devicetest.Must(t, err)
		return s
	}
	r1, r2, rel, stranger := gen(), gen(), gen(), gen()
	dir := t.TempDir()
	one := rootDoc(t, dir, 1, r1, rel, r1)
	two := rootDoc(t, dir, 2, r2, rel, r1, r2)
	evil := rootDoc(t, t.TempDir(), 2, stranger, rel, stranger)

	noRoot := tb.Cfg.Path
	data, err := os.ReadFile(noRoot)
	devicetest.Must(t, err)
	withRoot := filepath.Join(tb.Dir, "with-root.toml")
	re := regexp.MustCompile(`(?m)^keys_dir = .*$`)
	devicetest.Must(t, os.WriteFile(withRoot, []byte(re.ReplaceAllString(string(data), "$0\nroot = '"+one+"'")), 0o644))

	clitest.Run(t, func(args ...string) (int, string, string) { return otad(t, args...) }, []clitest.Case{
		{Args: []string{"trust", "-h"}, Stdout: "usage: otad trust update"},
		{Args: []string{"trust"}, Code: 2, Stderr: "usage: otad trust update"},
		{Args: []string{"trust", "update", "-c", withRoot}, Code: 2, Stderr: "want at least 1 arguments"},
		{Args: []string{"trust", "update", "-c", noRoot, two}, Code: 2, Stderr: "trust.root is not set"},
		{Args: []string{"trust", "update", "-c", withRoot, evil}, Code: 3, Stderr: "root_signature"},
		{Args: []string{"trust", "update", "-c", withRoot, two}, Stdout: "root of trust: version 2, was 1"},
		{Args: []string{"trust", "update", "-c", withRoot, two}, Code: 3, Stderr: "keeps version 2: root_version"},
		{Args: []string{"trust", "update", "-c", withRoot, one}, Code: 3, Stderr: "not newer"},
	})
}
