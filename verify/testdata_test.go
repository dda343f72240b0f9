package verify

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The committed fixtures stay consistent: the example envelope verifies with the test
// key, and every committed manifest parses.
func TestTestdata(t *testing.T) {
	key, err := LoadKeyFile(filepath.Join("..", "testdata", "keys", "test-ecdsa.pub"))
	if err != nil {
		t.Fatal(err)
	}
	priv, err := LoadPrivateKeyFile(filepath.Join("..", "testdata", "keys", "test-ecdsa.key"))
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := KeyID(priv.Public()); id != key.ID {
		t.Fatalf("test-ecdsa.key and test-ecdsa.pub are not a pair")
	}
	kr := NewKeyring(key)
	raw, err := os.ReadFile(filepath.Join("..", "testdata", "manifests", "example.envelope.json"))
	if err != nil {
		t.Fatal(err)
	}
	offer, err := Check(raw, kr, Policy{DeviceID: "any", Compatible: "acme,gw-v2"},
		Facts{Now: time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC), SecurityFloor: 7})
	if err != nil {
		t.Fatalf("example envelope: %v", err)
	}
	if offer.Manifest.ID != "rel-test-1" || offer.Manifest.Payload.Size != 56 {
		t.Errorf("example manifest %+v", offer.Manifest)
	}
	printed, err := os.ReadFile(filepath.Join("..", "testdata", "manifests", "example.manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, printed); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(compact.Bytes(), offer.ManifestBytes) {
		t.Errorf("example.manifest.json is not the envelope's manifest")
	}

	paths, _ := filepath.Glob(filepath.Join("..", "testdata", "manifests", "*.manifest.json"))
	if len(paths) < 2 {
		t.Fatalf("manifests: %v", paths)
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseManifest(b); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}
