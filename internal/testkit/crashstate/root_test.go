package crashstate

import (
	"crypto"
	"hash/maphash"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/otad/otad/device/node"
	"github.com/otad/otad/trust"
	"github.com/otad/otad/verify"
)

// TestRootUpdatePowerCut: a root update (docs/contract/trust.md) is
// written through the recording layer, and every state the persistence
// model builds from its trace, at every point, a torn write included,
// leaves a device that starts on the old root or the new one, never
// neither; and on the new one only with the dropped key known as revoked.
func TestRootUpdatePowerCut(t *testing.T) {
	gen := func() crypto.Signer {
		s, err := verify.GenerateKey(verify.KeyEd25519)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	key := func(s crypto.Signer) verify.Key {
		id, _ := verify.KeyID(s.Public())
		return verify.Key{ID: id, Public: s.Public()}
	}
	rk, relFirst, relOld, relNew := gen(), gen(), gen(), gen()
	doc := func(v uint64, rel crypto.Signer) []byte {
		r := &trust.Root{Version: v, Root: trust.Role{Threshold: 1, Keys: []verify.Key{key(rk)}}, Release: trust.Role{Threshold: 1, Keys: []verify.Key{key(rel)}}}
		if _, err := r.Sign(rk); err != nil {
			t.Fatal(err)
		}
		b, err := r.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	root := t.TempDir()
	anchor := filepath.Join(t.TempDir(), "root.json")
	state := filepath.Join(root, "state")
	for p, b := range map[string][]byte{anchor: doc(1, relFirst), filepath.Join(state, node.RootFile): doc(2, relOld)} {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	initial, err := readImage(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	tr := newTrace(initial)
	log := slog.New(slog.DiscardHandler)
	keys, err := node.LoadRoot(anchor, state, fsys{&storage{root: root, trace: tr}}, log)
	if err != nil || keys.Version() != 2 {
		t.Fatalf("before: version %d, %v", keys.Version(), err)
	}
	three, err := trust.Parse(doc(3, relNew))
	if err != nil {
		t.Fatal(err)
	}
	if _, to, err := keys.UpdateRoot([]*trust.Root{three}); err != nil || to != 3 {
		t.Fatalf("update: %d, %v", to, err)
	}
	ops := tr.Ops()
	if len(ops) == 0 {
		t.Fatal("the update wrote nothing through the recording layer")
	}
	// relOld is in neither the image's root nor the new one: only revoked.json
	// can say that root 3 dropped it.
	dropped := key(relOld).ID
	seen := map[uint64]int{}
	dir := t.TempDir()
	FullModel().Walk(initial, ops, maphash.MakeSeed(), func(s State, img func() *Image) bool {
		if err := img().materialize(dir); err != nil {
			t.Fatal(err)
		}
		k, err := node.LoadRoot(anchor, filepath.Join(dir, "state"), nil, log)
		if err != nil {
			t.Fatalf("%v: the device does not start: %v", s, err)
		}
		v := k.Version()
		seen[v]++
		switch v {
		case 2:
		case 3:
			if _, ok := k.Current().Revoked[dropped]; !ok {
				t.Fatalf("%v: root 3 without its dropped key known as revoked", s)
			}
		default:
			t.Fatalf("%v: root version %d, want 2 or 3", s, v)
		}
		return true
	})
	if seen[2] == 0 || seen[3] == 0 {
		t.Fatalf("states by version %v: want both the old and the new root among them", seen)
	}
	t.Logf("%d power-cut states: %v by root version", seen[2]+seen[3], seen)
}
