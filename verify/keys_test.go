package verify

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/otad/otad/ota"
)

func TestKeyTypes(t *testing.T) {
	manifest := manifestJSON(t, nil)
	for _, kind := range []string{KeyECDSAP256, KeyEd25519, KeyRSA3072, ""} {
		t.Run("kind="+kind, func(t *testing.T) {
			signer, key := newSigner(t, kind)
			_, otherKey := newSigner(t, kind)
			sig, err := SignManifest(manifest, signer)
			if err != nil {
				t.Fatal(err)
			}
			if sig.KeyID != key.ID || len(sig.KeyID) != 64 {
				t.Errorf("KeyID %q, want %q", sig.KeyID, key.ID)
			}
			kr := NewKeyring(key)
			if err := kr.VerifyThreshold(manifest, []Signature{sig}, 1); err != nil {
				t.Errorf("own signature: %v", err)
			}
			tampered := append([]byte(nil), manifest...)
			tampered[len(tampered)/2] ^= 1
			if err := kr.VerifyThreshold(tampered, []Signature{sig}, 1); ota.CodeOf(err) != ota.CodeBadSignature {
				t.Errorf("tampered manifest: %v, want bad_signature", err)
			}
			if err := NewKeyring(otherKey).VerifyThreshold(manifest, []Signature{{Sig: sig.Sig}}, 1); ota.CodeOf(err) != ota.CodeBadSignature {
				t.Errorf("other key: %v, want bad_signature", err)
			}
		})
	}
}

func TestVerifyThreshold(t *testing.T) {
	manifest := manifestJSON(t, nil)
	sA, kA := newSigner(t, KeyECDSAP256)
	sB, kB := newSigner(t, KeyEd25519)
	sC, kC := newSigner(t, KeyECDSAP256)
	sign := func(s crypto.Signer) Signature {
		sig, err := SignManifest(manifest, s)
		if err != nil {
			t.Fatal(err)
		}
		return sig
	}
	a, b, c := sign(sA), sign(sB), sign(sC)
	a2 := sign(sA) // ECDSA signatures are randomised: a second, different signature by A
	noID := func(s Signature) Signature { s.KeyID = ""; return s }
	withID := func(s Signature, id string) Signature { s.KeyID = id; return s }

	tests := []struct {
		name      string
		keys      []Key
		sigs      []Signature
		threshold int
		ok        bool
	}{
		{"one of one", []Key{kA}, []Signature{a}, 1, true},
		{"threshold 0 means 1", []Key{kA}, []Signature{a}, 0, true},
		{"threshold 0 still needs one", []Key{kA}, []Signature{c}, 0, false},
		{"two keys threshold 2", []Key{kA, kB}, []Signature{a, b}, 2, true},
		{"two keys threshold 2, one signed", []Key{kA, kB}, []Signature{a}, 2, false},
		{"same key twice counts once", []Key{kA, kB}, []Signature{a, a2}, 2, false},
		{"same signature twice counts once", []Key{kA, kB}, []Signature{a, a}, 2, false},
		{"duplicate trusted key counts once", []Key{kA, kA}, []Signature{a, a2}, 2, false},
		{"untrusted signer does not count", []Key{kA, kB}, []Signature{a, c}, 2, false},
		{"threshold above key count", []Key{kA}, []Signature{a}, 2, false},
		{"no keyid tries every key", []Key{kA, kB, kC}, []Signature{noID(c)}, 1, true},
		{"no keyid, two keys", []Key{kA, kB}, []Signature{noID(a), noID(b)}, 2, true},
		{"keyid upper case", []Key{kA}, []Signature{withID(a, strings.ToUpper(kA.ID))}, 1, true},
		{"keyid routes to that key only", []Key{kA, kB}, []Signature{withID(a, kB.ID)}, 1, false},
		{"unknown keyid is skipped", []Key{kA}, []Signature{withID(a, strings.Repeat("0", 64))}, 1, false},
		{"unknown keyid beside a good one", []Key{kA}, []Signature{withID(c, strings.Repeat("0", 64)), a}, 1, true},
		{"garbage signature", []Key{kA}, []Signature{{Sig: []byte("garbage")}}, 1, false},
		{"no keys", nil, []Signature{a}, 1, false},
		{"no signatures", []Key{kA}, nil, 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := NewKeyring(tt.keys...).VerifyThreshold(manifest, tt.sigs, tt.threshold)
			if tt.ok && err != nil {
				t.Fatalf("want ok, got %v", err)
			}
			if !tt.ok && ota.CodeOf(err) != ota.CodeBadSignature {
				t.Fatalf("want bad_signature, got %v", err)
			}
		})
	}
}

func TestNewKeyring(t *testing.T) {
	_, kA := newSigner(t, KeyECDSAP256)
	small, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	noID := Key{Public: kA.Public, Path: "/somewhere/a.pub"}
	kr := NewKeyring(noID, kA, Key{Public: &small.PublicKey}, Key{Public: &p384.PublicKey}, Key{Public: "not a key"})
	if kr.Len() != 1 {
		t.Fatalf("Len %d, want 1 (duplicates and unusable keys left out)", kr.Len())
	}
	got := kr.Keys()
	if got[0].ID != kA.ID || got[0].Path != "/somewhere/a.pub" {
		t.Errorf("key %+v: ID not computed or Path lost", got[0])
	}
	got[0].ID = "changed"
	if kr.Keys()[0].ID != kA.ID {
		t.Error("Keys() exposes the keyring's own slice")
	}
	var nilKR *Keyring
	if nilKR.Len() != 0 || nilKR.Keys() != nil {
		t.Error("nil keyring is not empty")
	}
}

func pemBytes(t *testing.T, typ string, der []byte) []byte {
	t.Helper()
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func TestLoadKeyDir(t *testing.T) {
	dir := t.TempDir()
	ecdsaSigner, ecdsaKey := newSigner(t, KeyECDSAP256)
	_, edKey := newSigner(t, KeyEd25519)
	_, rsaKey := newSigner(t, KeyRSA3072)
	mustPub := func(k crypto.PublicKey) []byte {
		b, err := MarshalPublicKeyPEM(k)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	privPEM, err := MarshalPrivateKeyPEM(ecdsaSigner)
	if err != nil {
		t.Fatal(err)
	}
	small, _ := rsa.GenerateKey(rand.Reader, 1024)
	smallDER, _ := x509.MarshalPKIXPublicKey(&small.PublicKey)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	p384DER, _ := x509.MarshalPKIXPublicKey(&p384.PublicKey)

	// cosign.pub as cosign generate-key-pair writes it: a PKIX P-256 key, PEM "PUBLIC KEY".
	writeFile(t, filepath.Join(dir, "cosign.pub"), mustPub(ecdsaKey.Public))
	writeFile(t, filepath.Join(dir, "ed.pem"), mustPub(edKey.Public))
	writeFile(t, filepath.Join(dir, "rsa.pub"), append([]byte("comment before the key\n"), mustPub(rsaKey.Public)...))
	writeFile(t, filepath.Join(dir, "zz-duplicate.pub"), mustPub(ecdsaKey.Public))
	bad := map[string]string{
		"garbage.pub":   "no PEM block",
		"private.key":   "PEM type",
		"rsa1024.pub":   "too small",
		"p384.pub":      "curve",
		"pkcs1-rsa.pub": "PEM type",
		"two-keys.pub":  "more than one",
		"corrupt.pub":   "",
	}
	writeFile(t, filepath.Join(dir, "garbage.pub"), []byte("hello"))
	writeFile(t, filepath.Join(dir, "private.key"), privPEM)
	writeFile(t, filepath.Join(dir, "rsa1024.pub"), pemBytes(t, "PUBLIC KEY", smallDER))
	writeFile(t, filepath.Join(dir, "p384.pub"), pemBytes(t, "PUBLIC KEY", p384DER))
	writeFile(t, filepath.Join(dir, "pkcs1-rsa.pub"), pemBytes(t, "RSA PUBLIC KEY", x509.MarshalPKCS1PublicKey(rsaKey.Public.(*rsa.PublicKey))))
	writeFile(t, filepath.Join(dir, "two-keys.pub"), append(mustPub(edKey.Public), mustPub(rsaKey.Public)...))
	writeFile(t, filepath.Join(dir, "corrupt.pub"), pemBytes(t, "PUBLIC KEY", []byte{0x30, 0x03, 1, 2, 3}))
	// Not keys, not errors: a subdirectory and an editor's dot file.
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, ".cosign.pub.swp"), []byte("junk"))
	// A symlink to a key file is followed.
	target := filepath.Join(t.TempDir(), "linked.pub")
	_, linkedKey := newSigner(t, KeyEd25519)
	writeFile(t, target, mustPub(linkedKey.Public))
	if err := os.Symlink(target, filepath.Join(dir, "linked.pub")); err != nil {
		t.Fatal(err)
	}

	kr, badErrs, err := LoadKeyDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	wantIDs := map[string]string{ecdsaKey.ID: "cosign.pub", edKey.ID: "ed.pem", rsaKey.ID: "rsa.pub", linkedKey.ID: "linked.pub"}
	if kr.Len() != len(wantIDs) {
		t.Errorf("Len %d, want %d", kr.Len(), len(wantIDs))
	}
	for _, k := range kr.Keys() {
		if name, ok := wantIDs[k.ID]; !ok || filepath.Base(k.Path) != name {
			t.Errorf("unexpected key %s from %s", k.ID, k.Path)
		}
	}
	if len(badErrs) != len(bad) {
		t.Errorf("%d bad files reported, want %d: %v", len(badErrs), len(bad), badErrs)
	}
	for name, fragment := range bad {
		found := false
		for _, e := range badErrs {
			if strings.Contains(e.Error(), filepath.Join(dir, name)+":") {
				found = true
				if !strings.Contains(e.Error(), fragment) {
					t.Errorf("error for %s: %q lacks %q", name, e, fragment)
				}
			}
		}
		if !found {
			t.Errorf("bad file %s not reported by name in %v", name, badErrs)
		}
	}
}

func TestLoadKeyDirUnreadable(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope")
	_, _, err := LoadKeyDir(missing)
	if err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("LoadKeyDir(missing): %v, want an error naming %s", err, missing)
	}
	kr, bad, err := LoadKeyDir(t.TempDir())
	if err != nil || len(bad) != 0 || kr.Len() != 0 {
		t.Fatalf("empty dir: %v %v %d", err, bad, kr.Len())
	}
}

func TestLoadPrivateKeyFile(t *testing.T) {
	dir := t.TempDir()
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ecDER, _ := x509.MarshalECPrivateKey(ec)
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	p384DER, _ := x509.MarshalPKCS8PrivateKey(p384)
	ed, _ := GenerateKey(KeyEd25519)
	edPEM, _ := MarshalPrivateKeyPEM(ed)
	pubPEM, _ := MarshalPublicKeyPEM(ec.Public())

	tests := []struct {
		name    string
		content []byte
		pub     crypto.PublicKey
		errLike string
	}{
		{"pkcs8 ed25519", edPEM, ed.Public(), ""},
		{"sec1 ec", pemBytes(t, "EC PRIVATE KEY", ecDER), ec.Public(), ""},
		{"pkcs1 rsa", pemBytes(t, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(rsaKey)), rsaKey.Public(), ""},
		{"p384 refused", pemBytes(t, "PRIVATE KEY", p384DER), nil, "curve"},
		{"public key", pubPEM, nil, "PEM file type"},
		{"encrypted", pemBytes(t, "ENCRYPTED PRIVATE KEY", []byte{1}), nil, "encrypted"},
		{"garbage", []byte("nope"), nil, "PEM"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "_")+".key")
			writeFile(t, path, tt.content)
			s, err := LoadPrivateKeyFile(path)
			if tt.errLike != "" {
				if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tt.errLike) {
					t.Fatalf("err %v: want one naming %s and saying %q", err, path, tt.errLike)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !s.Public().(interface{ Equal(crypto.PublicKey) bool }).Equal(tt.pub) {
				t.Error("loaded a different key")
			}
		})
	}
	if _, err := LoadPrivateKeyFile(filepath.Join(dir, "missing.key")); err == nil || !strings.Contains(err.Error(), "missing.key") {
		t.Errorf("missing file: %v", err)
	}
}

// opaqueSigner hides the concrete key type, as a hardware token's signer would.
type opaqueSigner struct{ s crypto.Signer }

func (o opaqueSigner) Public() crypto.PublicKey { return o.s.Public() }
func (o opaqueSigner) Sign(r io.Reader, d []byte, opts crypto.SignerOpts) ([]byte, error) {
	return o.s.Sign(r, d, opts)
}

func TestSignManifestOpaqueSigner(t *testing.T) {
	manifest := manifestJSON(t, nil)
	for _, kind := range []string{KeyECDSAP256, KeyEd25519, KeyRSA3072} {
		t.Run(kind, func(t *testing.T) {
			s, key := newSigner(t, kind)
			sig, err := SignManifest(manifest, opaqueSigner{s})
			if err != nil {
				t.Fatal(err)
			}
			if err := NewKeyring(key).VerifyThreshold(manifest, []Signature{sig}, 1); err != nil {
				t.Fatal(err)
			}
		})
	}
	small, _ := rsa.GenerateKey(rand.Reader, 1024)
	if _, err := SignManifest(manifest, small); err == nil {
		t.Error("signed with a key devices refuse")
	}
	if _, err := GenerateKey("dsa"); err == nil {
		t.Error("GenerateKey accepted an unknown kind")
	}
}
