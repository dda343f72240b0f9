package device

import (
	"crypto"
	"os"
	"path/filepath"
	"regexp"
	"strings"
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
// refused by name, one that does not parse by its file; a device without a
// root says so.
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
	garbled := filepath.Join(dir, "garbled.json")
	devicetest.Must(t, os.WriteFile(garbled, []byte(`{"signed": 1}`), 0o644))

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
		{Args: []string{"trust", "update", "-c", withRoot, two, garbled}, Code: 3, Stderr: "keeps version 1: " + garbled + ": bad_root: signed: want an object"},
		{Args: []string{"trust", "update", "-c", withRoot, two}, Stdout: "root of trust: version 2, was 1"},
		{Args: []string{"trust", "update", "-c", withRoot, two}, Code: 3, Stderr: "keeps version 2: root_version"},
		{Args: []string{"trust", "update", "-c", withRoot, one}, Code: 3, Stderr: "not newer"},
	})
}

// withRootConfig writes a copy of tb's config that trusts the root at root.
func withRootConfig(t *testing.T, tb *devicetest.Testbed, root string) string {
	t.Helper()
	data, err := os.ReadFile(tb.Cfg.Path)
	devicetest.Must(t, err)
	p := filepath.Join(t.TempDir(), "otad.toml")
	re := regexp.MustCompile(`(?m)^keys_dir = .*$`)
	devicetest.Must(t, os.WriteFile(p, []byte(re.ReplaceAllString(string(data), "$0\nroot = '"+root+"'")), 0o644))
	return p
}

// A config whose root of trust is not signed by its own root keys is a bad
// config for every command that reads it (exit 2, docs/contract/commands.md),
// otad info included: the refusal is the device's, not the offer's.
func TestUnsignedRootIsABadConfig(t *testing.T) {
	tb := devicetest.New(t, devicetest.Options{Policy: "manual"})
	rk, err := verify.GenerateKey(verify.KeyEd25519)
	devicetest.Must(t, err)
	rel, err := verify.GenerateKey(verify.KeyEd25519)
	devicetest.Must(t, err)
	cfg := withRootConfig(t, tb, rootDoc(t, t.TempDir(), 1, rk, rel))
	offer := writeEnv(t, func() []byte { b, _ := tb.Offer("v2", 2, devicetest.OfferOpts{}); return b }())
	for _, c := range []struct {
		name string
		args []string
		out  string // in stdout or stderr
	}{
		{"info", []string{"info", "-c", cfg, offer}, "trust.root"},
		{"info --json", []string{"info", "--json", "-c", cfg, offer}, `"exit": 2`},
		{"install", []string{"install", "-c", cfg, offer}, "trust.root"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, stdout, stderr := otad(t, c.args...)
			if code != 2 || !strings.Contains(stdout+stderr, c.out) || strings.Contains(stdout, `"code"`) {
				t.Errorf("exit %d, want 2 naming %q (and no offer code)\n%s%s", code, c.out, stdout, stderr)
			}
		})
	}
}

// otad status --json without a daemon carries trust_version as the daemon's
// does (docs/contract/formats.md): the root the device holds, the kept one
// once a newer was taken; absent for a device that trusts keys_dir.
func TestStatusTrustVersionWithoutDaemon(t *testing.T) {
	tb := devicetest.New(t, devicetest.Options{Policy: "manual"})
	gen := func() crypto.Signer {
		s, err := verify.GenerateKey(verify.KeyEd25519)
		devicetest.Must(t, err)
		return s
	}
	r1, r2, rel := gen(), gen(), gen()
	dir := t.TempDir()
	cfg := withRootConfig(t, tb, rootDoc(t, dir, 1, r1, rel, r1))
	two := rootDoc(t, dir, 2, r2, rel, r1, r2)
	for _, c := range []struct {
		name   string
		cfg    string
		update string // a root otad trust update takes first
		want   string // the trust_version line, "" for none
	}{
		{"keys_dir", tb.Cfg.Path, "", ""},
		{"the image's root", cfg, "", `"trust_version": 1`},
		{"the kept root", cfg, two, `"trust_version": 2`},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.update != "" {
				if code, _, stderr := otad(t, "trust", "update", "-c", c.cfg, c.update); code != 0 {
					t.Fatalf("trust update: exit %d %s", code, stderr)
				}
			}
			code, stdout, stderr := otad(t, "status", "--json", "-c", c.cfg)
			if code != 0 || (c.want == "") != !strings.Contains(stdout, "trust_version") || !strings.Contains(stdout, c.want) {
				t.Errorf("exit %d, want trust_version %q:\n%s%s", code, c.want, stdout, stderr)
			}
		})
	}
}

// otad config check -file-only checks the root of trust trust.root names:
// it ships in the image with the file, and otad run stops on one that does
// not parse or is not signed by a threshold of its own root keys.
func TestConfigCheckFileOnlyRoot(t *testing.T) {
	tb := devicetest.New(t, devicetest.Options{Policy: "manual"})
	rk, err := verify.GenerateKey(verify.KeyEd25519)
	devicetest.Must(t, err)
	rel, err := verify.GenerateKey(verify.KeyEd25519)
	devicetest.Must(t, err)
	dir := t.TempDir()
	signed := rootDoc(t, dir, 1, rk, rel, rk)
	unsigned := rootDoc(t, dir, 2, rk, rel)
	garbled := filepath.Join(dir, "garbled.json")
	devicetest.Must(t, os.WriteFile(garbled, []byte(`{"signed": 1}`), 0o644))
	for _, c := range []struct {
		name, root string
		code       int
		want       string
	}{
		{"signed", signed, 0, "is valid"},
		{"unsigned", unsigned, 2, "trust.root: " + unsigned + ": root_signature"},
		{"does not parse", garbled, 2, "trust.root: " + garbled + ": bad_root: signed: want an object, got 1"},
		// From a checkout the device's path is absent: said, not failed.
		{"not on this machine", filepath.Join(dir, "none.json"), 0, "trust.root: " + filepath.Join(dir, "none.json") + " is not on this machine: not checked"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, stdout, stderr := otad(t, "config", "check", "-file-only", "-c", withRootConfig(t, tb, c.root))
			if code != c.code || !strings.Contains(stdout+stderr, c.want) {
				t.Errorf("exit %d, want %d saying %q:\n%s%s", code, c.code, c.want, stdout, stderr)
			}
		})
	}
}
