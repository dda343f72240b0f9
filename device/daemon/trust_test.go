package daemon_test

import (
	"crypto"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/otad/otad/internal/testkit/devicetest"
	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/internal/testkit/signer"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/trust"
	"github.com/otad/otad/verify"
)

func rootOf(t *testing.T, v uint64, rootKey crypto.Signer, release []crypto.PublicKey, signers ...crypto.Signer) []byte {
	t.Helper()
	key := func(p crypto.PublicKey) verify.Key {
		id, err := verify.KeyID(p)
		devicetest.Must(t, err)
		return verify.Key{ID: id, Public: p}
	}
	r := &trust.Root{Version: v, Root: trust.Role{Threshold: 1, Keys: []verify.Key{key(rootKey.Public())}}, Release: trust.Role{Threshold: 1}}
	for _, p := range release {
		r.Release.Keys = append(r.Release.Keys, key(p))
	}
	for _, s := range signers {
		_, err := r.Sign(s)
		devicetest.Must(t, err)
	}
	b, err := r.Marshal()
	devicetest.Must(t, err)
	return b
}

// A retained root for the device's group rotates its release key over
// MQTT: the status says the new trust_version, an offer by the dropped key
// is refused bad_signature, and an older root on the fleet topic changes
// nothing.
func TestRootOverMQTT(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{})
	tb := devicetest.New(t, devicetest.Options{Broker: b.URL, Groups: []string{"canary"}, Policy: "manual"})
	rk, err := verify.GenerateKey(verify.KeyEd25519)
	devicetest.Must(t, err)
	next, err := signer.New()
	devicetest.Must(t, err)
	one := rootOf(t, 1, rk, []crypto.PublicKey{tb.Key.Public()}, rk)
	p := filepath.Join(tb.Dir, "root.json")
	devicetest.Must(t, os.WriteFile(p, one, 0o644))
	tb.Cfg.Trust.Root = p
	obs := observe(t, b.URL)
	runDevice(t, tb)
	obs.waitStatus(t, "trust version 1", func(s ota.Status) bool { return s.TrustVersion == 1 && s.State == ota.Idle })

	two := rootOf(t, 2, rk, []crypto.PublicKey{next.Key.Public()}, rk)
	mosquittoPub(t, b, "ota/groups/canary/trust/root", []byte("["+string(one)+","+string(two)+"]"), true)
	obs.waitStatus(t, "trust version 2", func(s ota.Status) bool { return s.TrustVersion == 2 })

	mosquittoPub(t, b, "ota/trust/root", one, true)
	env, _ := tb.Offer("v2", 2, devicetest.OfferOpts{})
	mosquittoPub(t, b, "ota/devices/"+devID+"/desired", env, true)
	st := obs.waitStatus(t, "the offer by the dropped key refused", func(s ota.Status) bool { return s.LastRefusal != nil })
	if r := st.LastRefusal; r.Code != ota.CodeBadSignature || !strings.Contains(r.Message, "revoked by root version 2") || st.TrustVersion != 2 {
		t.Fatalf("status: trust_version %d, refusal %+v", st.TrustVersion, r)
	}
}
