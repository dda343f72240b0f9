package operator

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/otad/otad/ota"
	"github.com/otad/otad/verify"
)

func rootctl(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Run(context.Background(), args, &out, &errb)
	return code, out.String() + errb.String()
}

// TestRootCeremony: the offline ceremony of docs/operating.md end to end —
// init, two holders sign, next rotates a root key and the release key,
// old and new holders sign, verify walks it; every refusal names its field.
func TestRootCeremony(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	for _, k := range []string{"r1", "r2", "r3", "r4", "rel1", "rel2", "op"} {
		if code, out := rootctl(t, "keygen", "--type", "ed25519", k); code != 0 {
			t.Fatalf("keygen %s: %d %s", k, code, out)
		}
	}
	steps := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"root", "init", "--root", "r1.pub,r2.pub,r3.pub", "--root-threshold", "2", "--release", "rel1.pub", "--release-threshold", "1", "--operator", "op.pub", "--operator-threshold", "1", "--out", "1.json"}, 0, "root version 1, unsigned"},
		{[]string{"root", "init", "--root", "r1.pub", "--root-threshold", "2", "--release", "rel1.pub", "--release-threshold", "1", "--out", "bad.json"}, ota.ExitRefused, "signed.root.threshold"},
		{[]string{"root", "init", "--root", "r1.pub", "--root-threshold", "1", "--release", "r1.pub", "--release-threshold", "1", "--out", "bad.json"}, ota.ExitRefused, "roles are kept apart"},
		{[]string{"root", "verify", "--trusted", "1.json", "1.json"}, ota.ExitRefused, "root_signature"},
		{[]string{"root", "sign", "--key", "r1.key", "1.json"}, 0, "1 signatures"},
		{[]string{"root", "sign", "--key", "r3.key", "1.json"}, 0, "2 signatures"},
		{[]string{"root", "next", "--from", "1.json", "--root", "r1.pub,r2.pub,r4.pub", "--release", "rel2.pub", "--out", "2.json"}, 0, "root version 2"},
		{[]string{"root", "sign", "--key", "r3.key", "2.json"}, 0, "counts only as a root key of version 1"},
		{[]string{"root", "sign", "--key", "r4.key", "2.json"}, 0, "own root keys"},
		{[]string{"root", "verify", "--trusted", "1.json", "2.json"}, ota.ExitRefused, "1 of 2"},
		{[]string{"root", "sign", "--key", "r1.key", "2.json"}, 0, "3 signatures"},
		{[]string{"root", "verify", "--trusted", "1.json", "2.json"}, 0, "takes version 2"},
		{[]string{"root", "verify", "--trusted", "2.json", "1.json"}, ota.ExitRefused, "root_version"},
		{[]string{"root", "init", "--from-keys-dir", "keys.d", "--root", "r1.pub", "--root-threshold", "1", "--out", "kd.json"}, 0, "skipped: "},
		{[]string{"root", "init", "--from-keys-dir", "empty.d", "--root", "r1.pub", "--root-threshold", "1", "--out", "kd2.json"}, ota.ExitUsage, "no public key in it"},
		{[]string{"root", "publish", "2.json"}, ota.ExitUsage, "missing --broker"},
	}
	if err := os.Mkdir("empty.d", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir("keys.d", 0o755); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile("rel1.pub")
	os.WriteFile(filepath.Join("keys.d", "release.pub"), b, 0o644)
	os.WriteFile(filepath.Join("keys.d", "README"), []byte("the release keys\n"), 0o644) // skipped, as a device skips it
	for _, s := range steps {
		code, out := rootctl(t, s.args...)
		if code != s.code || !strings.Contains(out, s.want) {
			t.Fatalf("otactl %s: exit %d, %q; want %d saying %q", strings.Join(s.args, " "), code, out, s.code, s.want)
		}
	}
	if _, err := os.Stat("bad.json"); err == nil {
		t.Error("a refused root was written")
	}
	// An offer signed by the new release key carries the chain it needs.
	os.WriteFile("img", bytes.Repeat([]byte("x"), 4096), 0o644)
	var env, errb bytes.Buffer
	if code := Run(context.Background(), []string{"sign", "--key", "rel2.key", "--image", "img", "--version", "2", "--compatible", "c", "--url", "https://h/img"}, &env, &errb); code != 0 {
		t.Fatalf("sign: %d %s", code, errb.String())
	}
	os.WriteFile("offer.json", env.Bytes(), 0o644)
	var out bytes.Buffer
	if code := Run(context.Background(), []string{"root", "attach", "--chain", "1.json,2.json", "offer.json"}, &out, &errb); code != 0 {
		t.Fatalf("attach: %d %s", code, errb.String())
	}
	e, err := verify.ParseEnvelope(bytes.TrimSpace(out.Bytes()))
	if err != nil || !bytes.Contains(e.Root, []byte(`"version":2`)) {
		t.Fatalf("the envelope with its chain: %v, root %.80s", err, e.Root)
	}
	if code, msg := rootctl(t, "root", "attach", "--chain", "kd.json", "offer.json"); code != ota.ExitRefused || !strings.Contains(msg, "root_signature") {
		t.Errorf("an unsigned root attached: %d %s", code, msg)
	}
}

// TestRootFileWithAWrongTypeOrAnUnknownField: a root file with a value of
// the wrong JSON type or a field the format does not name is refused
// (exit 3, bad_root) naming the file and the field's JSON path, in the
// contract's words (docs/contract/trust.md), not Go's.
func TestRootFileWithAWrongTypeOrAnUnknownField(t *testing.T) {
	t.Chdir(t.TempDir())
	for _, k := range []string{"r1", "rel1"} {
		if code, out := rootctl(t, "keygen", "--type", "ed25519", k); code != 0 {
			t.Fatalf("keygen %s: %d %s", k, code, out)
		}
	}
	for _, args := range [][]string{
		{"root", "init", "--root", "r1.pub", "--root-threshold", "1", "--release", "rel1.pub", "--release-threshold", "1", "--out", "1.json"},
		{"root", "sign", "--key", "r1.key", "1.json"},
	} {
		if code, out := rootctl(t, args...); code != 0 {
			t.Fatalf("otactl %s: %d %s", strings.Join(args, " "), code, out)
		}
	}
	good, err := os.ReadFile("1.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		file, old, new, want string
	}{
		{"fraction.json", `"version": 1,`, `"version": 1.0,`, "fraction.json: bad_root: signed.version: want a whole number, got 1.0"},
		{"quoted.json", `"threshold": 1,`, `"threshold": "1",`, `quoted.json: bad_root: signed.root.threshold: want a whole number, got the string "1"`},
		{"scheme.json", `"keyid": "`, `"scheme": "ed25519", "keyid": "`, "scheme.json: bad_root: signed.root.keys[0].scheme: unknown field, want one of keyid, public_key"},
	} {
		bad := bytes.Replace(good, []byte(c.old), []byte(c.new), 1)
		if bytes.Equal(bad, good) {
			t.Fatalf("%s: %q is not in the root", c.file, c.old)
		}
		if err := os.WriteFile(c.file, bad, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{{"root", "verify", "--trusted", "1.json", c.file}, {"root", "sign", "--key", "r1.key", c.file}} {
			code, out := rootctl(t, args...)
			if code != ota.ExitRefused || !strings.Contains(out, c.want) || strings.Contains(out, "Go struct") {
				t.Errorf("otactl %s: exit %d, %q; want %d saying %q", strings.Join(args, " "), code, out, ota.ExitRefused, c.want)
			}
		}
	}
}

// TestRootSignRefuses: otactl root sign refuses (exit 2, naming the key) a
// key whose signature no device would count, and leaves the file as it was.
func TestRootSignRefuses(t *testing.T) {
	t.Chdir(t.TempDir())
	for _, k := range []string{"r1", "r2", "rel1", "rel2", "op", "stranger"} {
		if code, out := rootctl(t, "keygen", "--type", "ed25519", k); code != 0 {
			t.Fatalf("keygen %s: %d %s", k, code, out)
		}
	}
	for _, args := range [][]string{
		{"root", "init", "--root", "r1.pub", "--root-threshold", "1", "--release", "rel1.pub", "--release-threshold", "1", "--operator", "op.pub", "--operator-threshold", "1", "--out", "1.json"},
		{"root", "sign", "--key", "r1.key", "1.json"},
		{"root", "next", "--from", "1.json", "--root", "r2.pub", "--release", "rel2.pub", "--out", "2.json"},
	} {
		if code, out := rootctl(t, args...); code != 0 {
			t.Fatalf("otactl %s: %d %s", strings.Join(args, " "), code, out)
		}
	}
	keyID := func(name string) string {
		k, err := verify.LoadKeyFile(name + ".pub")
		if err != nil {
			t.Fatal(err)
		}
		return k.ID
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--key", "rel1.key", "1.json"}, ota.ExitUsage, "key " + keyID("rel1") + " is a release key of root version 1"},
		{[]string{"--key", "op.key", "1.json"}, ota.ExitUsage, "key " + keyID("op") + " is a operator key"},
		{[]string{"--key", "stranger.key", "1.json"}, ota.ExitUsage, "key " + keyID("stranger") + " is not one of root version 1's root keys"},
		{[]string{"--key", "rel2.key", "2.json"}, ota.ExitUsage, "release key of root version 2"},
		{[]string{"--key", "stranger.key", "--previous", "1.json", "2.json"}, ota.ExitUsage, "neither one of root version 2's root keys nor one of version 1's"},
		{[]string{"--key", "r1.key", "--previous", "2.json", "2.json"}, ota.ExitUsage, "not the version before 2"},
		{[]string{"--key", "stranger.key", "2.json"}, 0, "counts only as a root key of version 1"},
		{[]string{"--key", "r1.key", "--previous", "1.json", "2.json"}, 0, "a root key of version 1"},
		{[]string{"--key", "r2.key", "2.json"}, 0, "one of its own root keys"},
	} {
		before, _ := os.ReadFile(c.args[len(c.args)-1])
		code, out := rootctl(t, append([]string{"root", "sign"}, c.args...)...)
		if code != c.code || !strings.Contains(out, c.want) {
			t.Errorf("otactl root sign %s: exit %d, %q; want %d saying %q", strings.Join(c.args, " "), code, out, c.code, c.want)
		}
		if after, _ := os.ReadFile(c.args[len(c.args)-1]); code != 0 && !bytes.Equal(before, after) {
			t.Errorf("otactl root sign %s: refused, but the file changed", strings.Join(c.args, " "))
		}
	}
}
