package verify

import (
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/otad/otad/ota"
)

// The real openssl command line is the reference for "what other tools produce":
// signatures from `openssl dgst -sha256 -sign` (ECDSA, RSA) and `openssl pkeyutl -rawin`
// (Ed25519) must verify, and signatures made here must pass openssl's verification.

func openssl(t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("openssl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func TestOpenSSLInterop(t *testing.T) {
	bin := requireTool(t, "openssl", "openssl")
	manifest := manifestJSON(t, nil)

	tests := []struct {
		kind string
		// gen writes a private key in openssl's own format to path (empty: use GenerateKey + PKCS#8).
		gen     []string
		ed25519 bool
	}{
		{kind: "ecdsa openssl sec1", gen: []string{"ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out"}},
		{kind: "rsa openssl pkcs1", gen: []string{"genrsa", "-traditional", "-out", "%s", "2048"}},
		{kind: "ed25519 openssl", gen: []string{"genpkey", "-algorithm", "ed25519", "-out"}, ed25519: true},
		{kind: KeyECDSAP256},
		{kind: KeyRSA3072},
		{kind: KeyEd25519, ed25519: true},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			dir := t.TempDir()
			keysDir := filepath.Join(dir, "keys.d")
			if err := os.Mkdir(keysDir, 0o755); err != nil {
				t.Fatal(err)
			}
			keyPath := filepath.Join(dir, "key.pem")
			pubPath := filepath.Join(keysDir, "signer.pub")
			manifestPath := filepath.Join(dir, "manifest.json")
			sigPath := filepath.Join(dir, "manifest.sig")
			writeFile(t, manifestPath, manifest)

			if tt.gen != nil {
				args := append([]string(nil), tt.gen...)
				if i := indexOf(args, "%s"); i >= 0 {
					args[i] = keyPath
				} else {
					args = append(args, keyPath)
				}
				openssl(t, bin, args...)
			} else {
				k, err := GenerateKey(tt.kind)
				if err != nil {
					t.Fatal(err)
				}
				b, err := MarshalPrivateKeyPEM(k)
				if err != nil {
					t.Fatal(err)
				}
				writeFile(t, keyPath, b)
			}
			openssl(t, bin, "pkey", "-in", keyPath, "-pubout", "-out", pubPath)

			// openssl signs, we verify.
			if tt.ed25519 {
				openssl(t, bin, "pkeyutl", "-sign", "-inkey", keyPath, "-rawin", "-in", manifestPath, "-out", sigPath)
			} else {
				openssl(t, bin, "dgst", "-sha256", "-sign", keyPath, "-out", sigPath, manifestPath)
			}
			sigBytes, err := os.ReadFile(sigPath)
			if err != nil {
				t.Fatal(err)
			}
			kr, bad, err := LoadKeyDir(keysDir)
			if err != nil || len(bad) != 0 || kr.Len() != 1 {
				t.Fatalf("LoadKeyDir: %v %v len=%d", err, bad, kr.Len())
			}
			// Hand-written envelope with the base64 of openssl's output, as a shell script would make it.
			raw := []byte(`{"manifest":"` + base64.StdEncoding.EncodeToString(manifest) +
				`","signatures":[{"sig":"` + base64.StdEncoding.EncodeToString(sigBytes) + `"}]}`)
			policy := Policy{DeviceID: "gw-0001", Compatible: "acme,gw-v2"}
			if _, err := Check(raw, kr, policy, Facts{Now: testNow}); err != nil {
				t.Fatalf("openssl signature refused: %v", err)
			}
			raw = []byte(`{"manifest":"` + base64.StdEncoding.EncodeToString(manifest) +
				`","signatures":[{"keyid":"` + kr.Keys()[0].ID + `","sig":"` + base64.StdEncoding.EncodeToString(sigBytes) + `"}]}`)
			if _, err := Check(raw, kr, policy, Facts{Now: testNow}); err != nil {
				t.Fatalf("openssl signature with keyid refused: %v", err)
			}
			tampered := []byte(strings.Replace(string(manifest), "4.2.0", "4.2.1", 1))
			raw = []byte(`{"manifest":"` + base64.StdEncoding.EncodeToString(tampered) +
				`","signatures":[{"sig":"` + base64.StdEncoding.EncodeToString(sigBytes) + `"}]}`)
			if _, err := Check(raw, kr, policy, Facts{Now: testNow}); ota.CodeOf(err) != ota.CodeBadSignature {
				t.Fatalf("openssl signature over other bytes: %v, want bad_signature", err)
			}

			// We sign with the key file, openssl verifies.
			signer, err := LoadPrivateKeyFile(keyPath)
			if err != nil {
				t.Fatal(err)
			}
			sig, err := SignManifest(manifest, signer)
			if err != nil {
				t.Fatal(err)
			}
			if sig.KeyID != kr.Keys()[0].ID {
				t.Errorf("keyid %s, openssl's public key has %s", sig.KeyID, kr.Keys()[0].ID)
			}
			writeFile(t, sigPath, sig.Sig)
			if tt.ed25519 {
				openssl(t, bin, "pkeyutl", "-verify", "-pubin", "-inkey", pubPath, "-rawin", "-in", manifestPath, "-sigfile", sigPath)
			} else {
				openssl(t, bin, "dgst", "-sha256", "-verify", pubPath, "-signature", sigPath, manifestPath)
			}
		})
	}
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}
