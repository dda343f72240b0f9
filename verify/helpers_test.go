package verify

import (
	"crypto"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/otad/otad/internal/testkit/testtool"
)

// testNow is the fixed "now" of the tests; manifests are issued an hour before it.
var testNow = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

func newSigner(t testing.TB, kind string) (crypto.Signer, Key) {
	t.Helper()
	s, err := GenerateKey(kind)
	if err != nil {
		t.Fatalf("GenerateKey(%q): %v", kind, err)
	}
	id, err := KeyID(s.Public())
	if err != nil {
		t.Fatal(err)
	}
	return s, Key{ID: id, Public: s.Public()}
}

// baseManifest is a valid manifest as a JSON object, for tests to bend.
func baseManifest() map[string]any {
	return map[string]any{
		"schema":           1,
		"id":               "rel-2026.11.29-1",
		"version":          "4.2.0",
		"security_version": 7,
		"compatible":       []any{"acme,gw-v2"},
		"devices":          []any{"gw-0001", "gw-0002"},
		"issued_at":        testNow.Add(-time.Hour).Format(time.RFC3339),
		"expires_at":       testNow.Add(30 * 24 * time.Hour).Format(time.RFC3339),
		"payload": map[string]any{
			"url":           "https://updates.example.com/rootfs-4.2.0.img.zst",
			"compression":   "zstd",
			"size":          268435456,
			"sha256":        "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
			"download_size": 91234567,
		},
	}
}

func manifestJSON(t testing.TB, edit func(m map[string]any)) []byte {
	t.Helper()
	m := baseManifest()
	if edit != nil {
		edit(m)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func payloadOf(m map[string]any) map[string]any { return m["payload"].(map[string]any) }

func envelopeFor(t testing.TB, manifest []byte, signers ...crypto.Signer) []byte {
	t.Helper()
	var sigs []Signature
	for _, s := range signers {
		sig, err := SignManifest(manifest, s)
		if err != nil {
			t.Fatal(err)
		}
		sigs = append(sigs, sig)
	}
	raw, err := MarshalEnvelope(manifest, sigs...)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func requireTool(t *testing.T, tool, pkg string) string {
	t.Helper()
	return testtool.Require(t, tool, pkg)
}

func writeFile(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
