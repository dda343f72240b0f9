package verify

import (
	"crypto"
	"testing"
	"time"

	"github.com/otad/otad/ota"
)

// SignOffer's envelope passes the checks with a threshold of both keys.
func TestSignOffer(t *testing.T) {
	var keys []crypto.Signer
	var ring []Key
	for _, kind := range []string{KeyECDSAP256, KeyEd25519} {
		k, err := GenerateKey(kind)
		if err != nil {
			t.Fatal(err)
		}
		id, _ := KeyID(k.Public())
		keys, ring = append(keys, k), append(ring, Key{ID: id, Public: k.Public()})
	}
	now := time.Now().UTC().Truncate(time.Second)
	m := Manifest{Schema: 1, ID: "rel-1", Version: "1", Compatible: []string{"c"}, IssuedAt: now, ExpiresAt: now.Add(time.Hour),
		Payload: Payload{URL: "https://x/i", Compression: ota.CompressionNone, Size: 10, SHA256: "00000000000000000000000000000000000000000000000000000000000000aa"}}
	env, err := SignOffer(&m, keys...)
	if err != nil {
		t.Fatal(err)
	}
	off, err := Check(env, NewKeyring(ring...), Policy{DeviceID: "d", Compatible: "c", Threshold: 2}, Facts{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if off.Manifest.ID != "rel-1" {
		t.Fatalf("manifest %+v", off.Manifest)
	}
	// One key short of the threshold is refused.
	env1, _ := SignOffer(&m, keys[0])
	if _, err := Check(env1, NewKeyring(ring...), Policy{DeviceID: "d", Compatible: "c", Threshold: 2}, Facts{Now: now}); ota.CodeOf(err) != ota.CodeBadSignature {
		t.Fatalf("one signature for threshold 2: %v", err)
	}
}
