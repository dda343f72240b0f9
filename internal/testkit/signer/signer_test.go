package signer

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/otad/otad/verify"
)

// What Sign makes passes the offline checks against the key's public half.
func TestSign(t *testing.T) {
	s, err := New()
	if err != nil {
		t.Fatal(err)
	}
	env, err := s.Sign(Offer{ID: "rel-1", Version: "1.0", Compatible: "c", Devices: []string{"d1"}, URL: "https://h/img",
		Size: 10, SHA256: "0000000000000000000000000000000000000000000000000000000000000000"})
	if err != nil {
		t.Fatal(err)
	}
	e, err := verify.ParseEnvelope(env)
	if err != nil {
		t.Fatal(err)
	}
	m, err := verify.ParseManifest(e.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	if m.ID != "rel-1" || m.Devices[0] != "d1" || m.ExpiresAt.Sub(m.IssuedAt) != 24*time.Hour || time.Since(m.IssuedAt) < time.Minute {
		t.Fatalf("manifest %+v", m)
	}
	pub := filepath.Join(t.TempDir(), "release.pub")
	if err := os.WriteFile(pub, s.PublicKeyPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	key, err := verify.LoadKeyFile(pub)
	if err != nil {
		t.Fatal(err)
	}
	if err := verify.NewKeyring(key).VerifyThreshold(e.Manifest, e.Signatures, 1); err != nil {
		t.Fatal(err)
	}
}
