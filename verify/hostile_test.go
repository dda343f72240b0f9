package verify

import (
	"bytes"
	"testing"
	"time"

	"github.com/otad/otad/ota"
)

// Issue 9 (5, 9): issued_at far ahead is not_yet_valid (one offer dated 2099
// cannot make every later one stale); duplicate keys and keys differing only
// in case are refused instead of being resolved by the decoder's rules.
func TestHostileManifests(t *testing.T) {
	signer, key := newSigner(t, KeyECDSAP256)
	keys := NewKeyring(key)
	policy := Policy{DeviceID: "gw-0001", Compatible: "acme,gw-v2", Threshold: 1, ClockSkew: 5 * time.Minute}
	facts := Facts{Now: testNow, InactiveSlotSize: 512 << 20}
	future := func(d time.Duration) []byte {
		return manifestJSON(t, func(m map[string]any) {
			m["issued_at"] = testNow.Add(d).Format(time.RFC3339)
			m["expires_at"] = testNow.Add(d + time.Hour).Format(time.RFC3339)
		})
	}
	good := manifestJSON(t, nil)
	tests := []struct {
		name     string
		manifest []byte
		envelope func([]byte) []byte
		want     ota.Code
	}{
		{"issued 2099", manifestJSON(t, func(m map[string]any) {
			m["issued_at"] = "2099-01-01T00:00:00Z"
			m["expires_at"] = "2099-02-01T00:00:00Z"
		}), nil, ota.CodeNotYetValid},
		{"issued 25 h ahead", future(25 * time.Hour), nil, ota.CodeNotYetValid},
		{"issued 23 h ahead", future(23 * time.Hour), nil, ""},
		{"duplicate devices", bytes.Replace(good, []byte(`"devices":[`), []byte(`"devices":["gw-0001"],"devices":[`), 1), nil, ota.CodeBadManifest},
		{"devices and DEVICES", bytes.Replace(good, []byte(`"devices":["gw-0001","gw-0002"]`), []byte(`"devices":["gw-0099"],"DEVICES":["gw-0001"]`), 1), nil, ota.CodeBadManifest},
		{"duplicate payload.sha256", bytes.Replace(good, []byte(`"sha256":`), []byte(`"sha256":"00","sha256":`), 1), nil, ota.CodeBadManifest},
		{"duplicate envelope manifest", good, func(env []byte) []byte {
			return bytes.Replace(env, []byte(`{"manifest":`), []byte(`{"Manifest":"e30=","manifest":`), 1)
		}, ota.CodeBadEnvelope},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := envelopeFor(t, tc.manifest, signer)
			if tc.envelope != nil {
				env = tc.envelope(env)
			}
			_, err := Check(env, keys, policy, facts)
			if got := ota.CodeOf(err); got != tc.want {
				t.Fatalf("code %q (%v), want %q", got, err, tc.want)
			}
		})
	}
}
