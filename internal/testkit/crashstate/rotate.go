package crashstate

import (
	"crypto"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/otad/otad/device/node"
	"github.com/otad/otad/durable"
	"github.com/otad/otad/internal/testkit/signer"
	"github.com/otad/otad/trust"
	"github.com/otad/otad/verify"
)

// RootScenarios are a root update on every bootloader (issue 29): the
// device ships root 1 ([trust] root), whose release key is the fixture's;
// the offer is signed by a new release key and carries root 2, which
// trusts only the new one, in its envelope (docs/contract/trust.md, how a
// root arrives). The device keeps root 2 in its state directory before it
// takes the offer, and commits it. A power cut leaves the kept root old or
// new, never neither nor torn.
func RootScenarios() []Scenario {
	var out []Scenario
	for _, b := range Boots() {
		out = append(out, Scenario{Mode: Stream, Boot: b, End: Rotate})
	}
	return out
}

// rootFixture is Rotate's part of the fixture.
type rootFixture struct {
	anchor  []byte // root 1: the fixture's release key
	dropped string // the release key root 2 drops
	offer   []byte // signed by the new release key, carrying root 2
}

// newRootFixture signs roots 1 and 2 with a fresh root key and the
// rotated offer o with a fresh release key.
func newRootFixture(old *signer.Signer, o signer.Offer) (*rootFixture, error) {
	rk, err := verify.GenerateKey(verify.KeyEd25519)
	if err != nil {
		return nil, err
	}
	rel, err := signer.New()
	if err != nil {
		return nil, err
	}
	doc := func(v uint64, release crypto.Signer) ([]byte, error) {
		r := &trust.Root{Version: v, Root: trust.Role{Threshold: 1, Keys: []verify.Key{keyOf(rk)}},
			Release: trust.Role{Threshold: 1, Keys: []verify.Key{keyOf(release)}}}
		if _, err := r.Sign(rk); err != nil {
			return nil, err
		}
		return r.Marshal()
	}
	f := &rootFixture{dropped: keyOf(old.Key).ID}
	if f.anchor, err = doc(1, old.Key); err != nil {
		return nil, err
	}
	two, err := doc(2, rel.Key)
	if err != nil {
		return nil, err
	}
	env, err := rel.Sign(o)
	if err != nil {
		return nil, err
	}
	if f.offer, err = verify.AttachRoot(env, two); err != nil {
		return nil, err
	}
	return f, nil
}

func keyOf(s crypto.Signer) verify.Key {
	id, _ := verify.KeyID(s.Public())
	return verify.Key{ID: id, Public: s.Public()}
}

// offer is what sc's device is offered.
func (f *Fixture) offer(sc Scenario) []byte {
	if sc.End == Rotate {
		return f.root.offer
	}
	return f.offers[sc.Mode]
}

// anchorPath is where a Rotate device's image keeps its root ([trust] root).
func anchorPath(root string) string { return filepath.Join(root, "etc", "root.json") }

// keysAt is what the device trusts as it starts: its root of trust, read
// through fsys (so the root update is recorded), for Rotate; the shared
// keys directory's otherwise. Before it starts, the kept root and the
// revoked keys beside it must read whole: a torn one is a violation even
// though otad would fall back to the image's root.
func (r *Rig) keysAt(out *Outcome, fsys durable.FS) *node.Keys {
	if r.sc.End != Rotate {
		return r.keys
	}
	state := filepath.Join(r.root, "state")
	if b, err := os.ReadFile(filepath.Join(state, node.RootFile)); err == nil {
		if _, err := trust.Parse(b); err != nil {
			out.fail("the kept root is torn: %v", err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		out.fail("the kept root: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(state, node.RevokedFile)); err == nil {
		var m map[string]uint64
		if err := json.Unmarshal(b, &m); err != nil {
			out.fail("the kept list of revoked keys is torn: %v", err)
		}
	}
	k, err := node.LoadRoot(anchorPath(r.root), state, fsys, discard())
	if err != nil {
		out.fail("otad does not start: root of trust: %v", err)
		return nil
	}
	switch v := k.Version(); {
	case v == 2:
		if _, ok := k.Current().Revoked[r.fx.root.dropped]; !ok {
			out.fail("root 2 kept without the key it dropped known as revoked")
		}
	case v != 1:
		out.fail("root version %d kept: want 1 (the image's) or 2", v)
	}
	return k
}

// checkRootEnd: once the offer is committed, the device keeps root 2.
func (r *Rig) checkRootEnd(out *Outcome) {
	if r.sc.End != Rotate {
		return
	}
	k, err := node.LoadRoot(anchorPath(r.root), filepath.Join(r.root, "state"), nil, discard())
	if err != nil {
		out.fail("the root of trust at the end: %v", err)
	} else if v := k.Version(); v != 2 {
		out.fail("the offer that brought root 2 was taken; the device starts on root %d", v)
	}
}

// writeAnchor puts root 1 in a Rotate device's image, and returns the
// line of its [trust] section that names it.
func writeAnchor(sc Scenario, fx *Fixture, root string) (string, error) {
	if sc.End != Rotate {
		return "", nil
	}
	p := anchorPath(root)
	if err := os.WriteFile(p, fx.root.anchor, 0o600); err != nil {
		return "", err
	}
	return fmt.Sprintf("root = %q\n", p), nil
}
