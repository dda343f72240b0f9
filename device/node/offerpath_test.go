package node

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/agent"
	"github.com/otad/otad/internal/testkit/signer"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/slots"
	"github.com/otad/otad/verify"
)

var fuzzNow = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

// offerPath is the whole way of an offer on a device: raw bytes through the
// real checks (signatures, manifest, policy) into the state machine.
type offerPath struct {
	t     testing.TB
	chk   *checker
	s     agent.State
	p     agent.Policy
	ended map[string]bool // Target.Key of every offer that came to an outcome
}

func newOfferPath(t testing.TB, rel *signer.Signer) *offerPath {
	dir := t.TempDir()
	for _, s := range []string{"a", "b"} {
		if err := os.WriteFile(filepath.Join(dir, s), make([]byte, 1<<20), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	keys := &Keys{}
	id, _ := verify.KeyID(rel.Key.Public())
	keys.cur.Store(&Trusted{Keyring: verify.NewKeyring(verify.Key{ID: id, Public: rel.Key.Public()})})
	return &offerPath{t: t,
		chk: &checker{keys: keys, slots: map[ota.Slot]slots.Target{"A": slots.File(filepath.Join(dir, "a")), "B": slots.File(filepath.Join(dir, "b"))},
			clock: fixedClock(fuzzNow), policy: verify.Policy{DeviceID: "gw-1", Compatible: "acme", Threshold: 1, Schemes: []string{"https"}}},
		s: agent.State{Phase: ota.Idle, Booted: "A", BootID: "b1", Slots: map[ota.Slot]agent.SlotInfo{"A": {Status: ota.SlotGood, SHA256: strings.Repeat("0", 64)}}},
		p: agent.Policy{RebootImmediately: true, MaxRestarts: 2}, ended: map[string]bool{},
	}
}

type fixedClock time.Time

func (c fixedClock) Now() time.Time { return time.Time(c) }

// deliver checks raw and steps the machine with the verdict. Every install
// it starts ends at once with outcome (a failed write, or a health check
// that fails after the reboot), so later deliveries meet ended offers.
func (o *offerPath) deliver(raw []byte, healthy bool) {
	t, err := o.chk.Check(raw, agent.Facts{SecurityFloor: o.s.SecurityFloor, NewestIssuedAt: o.s.NewestIssuedAt,
		InactiveSlot: o.s.Booted.Other()})
	var ev agent.Event = agent.EvOffer{Target: t}
	if err != nil {
		ev = agent.EvRefused{Outcome: ota.Outcome{ID: t.ID, SHA256: t.SHA256(), Code: ota.CodeOf(err), Message: err.Error()}, Time: fuzzNow}
	}
	o.step(ev)
	if o.s.Phase != ota.Downloading {
		return
	}
	if !healthy {
		o.step(agent.EvInstallDone{Gen: o.s.InstallGen, Code: ota.CodeHashMismatch, Message: "tampered"})
		return
	}
	slot, bootID := o.s.Target.Slot, o.s.BootID+"'"
	o.step(agent.EvInstallDone{Gen: o.s.InstallGen})
	o.step(agent.EvBoot{Booted: slot, BootID: bootID})
	o.step(agent.EvHealth{OK: false, Message: "unhealthy"})
	o.step(agent.EvBoot{Booted: slot.Other(), BootID: bootID + "'"})
}

func (o *offerPath) step(ev agent.Event) {
	next, fx := agent.Step(o.s, o.p, time.Time{}, ev)
	for _, e := range fx {
		if si, ok := e.(agent.StartInstall); ok && o.ended[si.Target.Key()] {
			o.t.Fatalf("offer %s (manifest %s) ended before, and an install of it started", si.Target.ID, si.Target.ManifestSHA256)
		}
	}
	if r := next.LastResult; r != nil && (o.s.LastResult == nil || *r != *o.s.LastResult) && o.s.Target != nil && r.SHA256 == o.s.Target.SHA256() {
		o.ended[o.s.Target.Key()] = true
	}
	o.s = next
}

// FuzzOfferPath: whatever bytes arrive, in whatever order, no input starts
// an install of an offer that already ended (docs/contract/installing.md).
func FuzzOfferPath(f *testing.F) {
	rel, err := signer.New()
	if err != nil {
		f.Fatal(err)
	}
	sign := func(id string, issued time.Duration) []byte {
		sum := sha256.Sum256([]byte(id))
		env, err := rel.Sign(signer.Offer{ID: id, Version: id, Compatible: "acme", URL: "https://u/" + id,
			Size: 4096, SHA256: hex.EncodeToString(sum[:]), Issued: fuzzNow.Add(issued)})
		if err != nil {
			f.Fatal(err)
		}
		return env
	}
	x, older, newer := sign("rel-x", -time.Hour), sign("rel-old", -2*time.Hour), sign("rel-y", -time.Minute)
	f.Add(x, []byte("}garbage{"), older, x, true)
	f.Add(x, x, x, x, false)
	f.Add(newer, x, newer, x, false)
	f.Add(x, newer, []byte(strings.Replace(string(x), `"sig"`, `"SIG"`, 1)), x, true)
	base := newOfferPath(f, rel) // the slot files, made once
	f.Fuzz(func(t *testing.T, a, b, c, d []byte, healthy bool) {
		o := *base
		o.t, o.s, o.ended = t, base.s.Clone(), map[string]bool{}
		o.deliver(x, healthy) // x installs and ends (failed, or rolled back)
		for _, raw := range [][]byte{a, b, c, d, x} {
			o.deliver(raw, healthy)
		}
	})
}

func TestOfferPathKeepsEndedOffersEnded(t *testing.T) {
	rel, err := signer.New()
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("x"))
	x, err := rel.Sign(signer.Offer{ID: "rel-x", Version: "x", Compatible: "acme", URL: "https://u/x", Size: 4096,
		SHA256: hex.EncodeToString(sum[:]), Issued: fuzzNow.Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	o := newOfferPath(t, rel)
	o.deliver(x, true)
	if o.s.LastResult == nil || o.s.LastResult.Result != ota.ResultFailed || !o.ended[o.s.Ended[0].Key] {
		t.Fatalf("x did not end: %+v %+v", o.s.LastResult, o.s.Ended)
	}
	o.deliver([]byte("}garbage{"), true)
	o.deliver(x, true) // fails the test if x starts again
	if o.s.LastRefusal == nil || o.s.LastResult.Result != ota.ResultFailed {
		t.Fatalf("after garbage and a redelivery: %+v %+v", o.s.LastResult, o.s.LastRefusal)
	}
}
