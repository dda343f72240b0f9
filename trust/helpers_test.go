package trust

import (
	"crypto"
	"testing"

	"github.com/otad/otad/verify"
)

type keyPair struct {
	priv crypto.Signer
	pub  verify.Key
}

func newKeys(t testing.TB, n int) []keyPair {
	t.Helper()
	out := make([]keyPair, n)
	for i := range out {
		s, err := verify.GenerateKey(verify.KeyEd25519)
		if err != nil {
			t.Fatal(err)
		}
		id, err := verify.KeyID(s.Public())
		if err != nil {
			t.Fatal(err)
		}
		out[i] = keyPair{s, verify.Key{ID: id, Public: s.Public()}}
	}
	return out
}

func pubs(ks []keyPair) []verify.Key {
	out := make([]verify.Key, len(ks))
	for i, k := range ks {
		out[i] = k.pub
	}
	return out
}

// newRoot is version v with these root and release keys, signed by signers.
func newRoot(t testing.TB, v uint64, root []keyPair, rootThreshold int, release []keyPair, signers ...keyPair) *Root {
	t.Helper()
	r := &Root{Version: v, Root: Role{Threshold: rootThreshold, Keys: pubs(root)}, Release: Role{Threshold: 1, Keys: pubs(release)}}
	if err := r.Check(); err != nil {
		t.Fatalf("root %d: %v", v, err)
	}
	for _, s := range signers {
		if _, err := r.Sign(s.priv); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// roundTrip is r as a device reads it off the wire.
func roundTrip(t testing.TB, r *Root) *Root {
	t.Helper()
	b, err := r.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Parse(b)
	if err != nil {
		t.Fatalf("Parse(Marshal(root %d)): %v\n%s", r.Version, err, b)
	}
	return got
}
