package node_test

import (
	"context"
	"crypto"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/device/node"
	"github.com/otad/otad/internal/testkit/devicetest"
	"github.com/otad/otad/internal/testkit/signer"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/trust"
	"github.com/otad/otad/verify"
)

// rootKit makes roots for a test: root keys kept "offline", release keys
// as signers the Testbed can sign offers with.
type rootKit struct {
	t    *testing.T
	root []crypto.Signer
}

func newRootKit(t *testing.T) *rootKit {
	k := &rootKit{t: t}
	for range 3 {
		s, err := verify.GenerateKey(verify.KeyEd25519)
		devicetest.Must(t, err)
		k.root = append(k.root, s)
	}
	return k
}

func keyOf(t *testing.T, s crypto.Signer) verify.Key {
	id, err := verify.KeyID(s.Public())
	devicetest.Must(t, err)
	return verify.Key{ID: id, Public: s.Public()}
}

func newRelease(t *testing.T) *signer.Signer {
	s, err := signer.New()
	devicetest.Must(t, err)
	return s
}

// make is root version v trusting release, 2 of the kit's 3 root keys,
// signed by signers.
func (k *rootKit) make(v uint64, release []*signer.Signer, signers ...crypto.Signer) []byte {
	r := &trust.Root{Version: v, Release: trust.Role{Threshold: 1}, Root: trust.Role{Threshold: 2}}
	for _, s := range k.root {
		r.Root.Keys = append(r.Root.Keys, keyOf(k.t, s))
	}
	for _, s := range release {
		r.Release.Keys = append(r.Release.Keys, keyOf(k.t, s.Key))
	}
	devicetest.Must(k.t, r.Check())
	for _, s := range signers {
		_, err := r.Sign(s)
		devicetest.Must(k.t, err)
	}
	b, err := r.Marshal()
	devicetest.Must(k.t, err)
	return b
}

// withRoot gives tb the root doc as its [trust] root.
func withRoot(t *testing.T, tb *devicetest.Testbed, doc []byte) {
	p := filepath.Join(tb.Dir, "root.json")
	devicetest.Must(t, os.WriteFile(p, doc, 0o644))
	tb.Cfg.Trust.Root = p
}

// Twelve months offline: the device comes back a year on, takes the newest
// chain (two rotations, one dropping its release key) with no manual step,
// then the next offer. An offer by the dropped key is refused, naming it.
func TestTwelveMonthsOffline(t *testing.T) {
	tb := devicetest.New(t, devicetest.Options{Policy: "immediate"})
	k := newRootKit(t)
	k1, k2 := newRelease(t), newRelease(t)
	withRoot(t, tb, k.make(1, []*signer.Signer{k1}, k.root[0], k.root[1]))
	t0 := time.Now().UTC()
	v2, _ := tb.Offer("v2", 2, devicetest.OfferOpts{Signer: k1, Issued: t0})
	if j := tb.Settle("v2", v2); j.LastResult.Result != ota.ResultSuccess {
		t.Fatalf("v2: %+v", j.LastResult)
	}
	// A year on: root 2 drops k1 for k2, root 3 keeps k2.
	later := t0.AddDate(1, 0, 0)
	tb.Clock = clockAt{later}
	chain := "[" + string(k.make(2, []*signer.Signer{k2}, k.root[0], k.root[2])) + "," +
		string(k.make(3, []*signer.Signer{k2}, k.root[1], k.root[2])) + "]"

	in := tb.Start(nil)
	from, to, err := in.D.UpdateRoot(context.Background(), [][]byte{[]byte(chain)})
	if err != nil || from != 1 || to != 3 {
		t.Fatalf("UpdateRoot = %d→%d, %v; want 1→3", from, to, err)
	}
	if v := in.D.Agent.Status().TrustVersion; v != 3 {
		t.Errorf("status trust_version %d, want 3", v)
	}
	revoked, _ := tb.Offer("old", 4, devicetest.OfferOpts{Signer: k1, Issued: later})
	o, err := in.D.Agent.Install(context.Background(), revoked)
	devicetest.Must(t, err)
	if o.Code != ota.CodeBadSignature || !strings.Contains(o.Message, keyOf(t, k1.Key).ID+" was revoked by root version 2") {
		t.Errorf("an offer by the revoked key: %+v, want bad_signature naming it", o)
	}
	in.Stop()
	devicetest.Must(t, in.Wait(t))
	if b, err := os.ReadFile(filepath.Join(tb.Cfg.StateDir, node.RootFile)); err != nil || !strings.Contains(string(b), `"version": 3`) {
		t.Fatalf("kept root: %v\n%s", err, b)
	}
	// Restarted, it trusts root 3 without being told again, and takes the
	// next offer.
	in = tb.Start(nil)
	if v := in.D.Agent.Status().TrustVersion; v != 3 {
		t.Errorf("after a restart: trust_version %d, want 3", v)
	}
	v3, sum := tb.Offer("v3", 3, devicetest.OfferOpts{Signer: k2, Issued: later})
	o, err = in.D.Agent.Install(context.Background(), v3)
	devicetest.Must(t, err)
	if o.Result != ota.ResultStaged || o.SHA256 != sum {
		in.Stop()
		in.Wait(t)
		t.Fatalf("v3 a year on: %+v, want staged", o)
	}
	devicetest.Must(t, in.Wait(t)) // staged: the sim device reboots
	in = tb.Start(nil)
	defer func() { in.Stop(); in.Wait(t) }()
	// An attacker's root and an old one change nothing.
	evil := newRootKit(t)
	for _, doc := range [][]byte{evil.make(4, []*signer.Signer{k1}, evil.root[0], evil.root[1]), k.make(2, []*signer.Signer{k1}, k.root[0], k.root[1])} {
		if _, to, err := in.D.UpdateRoot(context.Background(), [][]byte{doc}); err == nil || to != 3 {
			t.Errorf("a root that must be refused: version %d, %v", to, err)
		}
	}
}

// Revocation bites at once: an install whose download is under way when
// its key is revoked never flips.
func TestRevokedDuringDownload(t *testing.T) {
	tb := devicetest.New(t, devicetest.Options{Policy: "immediate"})
	k := newRootKit(t)
	k1, k2 := newRelease(t), newRelease(t)
	withRoot(t, tb, k.make(1, []*signer.Signer{k1, k2}, k.root[0], k.root[1]))
	tb.HoldAt.Store(1 << 20)
	in := tb.Start(nil)
	defer func() { in.Stop(); in.Wait(t) }()
	a, _ := tb.Offer("a", 2, devicetest.OfferOpts{Signer: k1})
	done := make(chan ota.Outcome, 1)
	go func() {
		o, _ := in.D.Agent.Install(context.Background(), a)
		done <- o
	}()
	for tb.Fetched.Load() < 1<<20 {
		time.Sleep(5 * time.Millisecond)
	}
	if _, _, err := in.D.UpdateRoot(context.Background(), [][]byte{k.make(2, []*signer.Signer{k2}, k.root[1], k.root[2])}); err != nil {
		t.Fatal(err)
	}
	tb.HoldAt.Store(0)
	o := <-done
	if o.Result != ota.ResultFailed || o.Code != ota.CodeBadSignature || !strings.Contains(o.Message, keyOf(t, k1.Key).ID+" was revoked by root version 2") {
		t.Fatalf("the install under way: %+v, want failed bad_signature naming the revoked key", o)
	}
	if st := in.D.Agent.Status(); st.State != ota.Idle || st.Slots["B"].Status != ota.SlotBad {
		t.Fatalf("status %s, slot B %+v: want idle, B bad", st.State, st.Slots["B"])
	}
	if bl := tb.Sim(); bl == nil {
		t.Fatal("no sim bootloader")
	}
	tb.CheckBootable("after the refused flip")
}

// A pending offer by a key revoked while it waited is refused when it is
// taken up, with the revoked key named.
func TestRevokedPendingOffer(t *testing.T) {
	tb := devicetest.New(t, devicetest.Options{Policy: "manual"})
	k := newRootKit(t)
	k1, k2 := newRelease(t), newRelease(t)
	withRoot(t, tb, k.make(1, []*signer.Signer{k1, k2}, k.root[0], k.root[1]))
	in := tb.Start(nil)
	a, _ := tb.Offer("a", 2, devicetest.OfferOpts{Signer: k2})
	if o, err := in.D.Agent.Install(context.Background(), a); err != nil || o.Result != ota.ResultStaged {
		t.Fatalf("a: %+v %v, want staged", o, err)
	}
	b, _ := tb.Offer("b", 3, devicetest.OfferOpts{Signer: k1, Issued: time.Now()})
	if o, err := in.D.Agent.Install(context.Background(), b); err != nil || o.Result != ota.ResultPending {
		t.Fatalf("b: %+v %v, want pending", o, err)
	}
	if _, _, err := in.D.UpdateRoot(context.Background(), [][]byte{k.make(2, []*signer.Signer{k2}, k.root[1], k.root[2])}); err != nil {
		t.Fatal(err)
	}
	in.Stop()
	devicetest.Must(t, in.Wait(t))
	// The operator reboots: the new slot is committed, then b is taken up.
	_, err := tb.Sim().Boot()
	devicetest.Must(t, err)
	in = tb.Start(nil)
	defer func() { in.Stop(); in.Wait(t) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st := in.D.Agent.Status()
		if st.Pending == nil && st.LastRefusal != nil {
			r := st.LastRefusal
			if r.Code != ota.CodeBadSignature || !strings.Contains(r.Message, "revoked by root version 2") || st.State != ota.Idle {
				t.Fatalf("status %s, refusal %+v: want the pending offer refused bad_signature naming the revoked key", st.State, r)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pending offer was not refused: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// An offer signed by a new release key carries the root that trusts it:
// the device takes the chain from the envelope, then the offer; otad info
// judges the same offer without keeping the root.
func TestOfferCarriesItsRoot(t *testing.T) {
	tb := devicetest.New(t, devicetest.Options{Policy: "immediate"})
	k := newRootKit(t)
	k1, k2 := newRelease(t), newRelease(t)
	withRoot(t, tb, k.make(1, []*signer.Signer{k1}, k.root[0], k.root[1]))
	env, sum := tb.Offer("v2", 2, devicetest.OfferOpts{Signer: k2})
	bare := env
	env, err := verify.AttachRoot(env, k.make(2, []*signer.Signer{k2}, k.root[0], k.root[2]))
	devicetest.Must(t, err)

	if v := node.Inspect(tb.Cfg, tb.Journal(), "A", env); v.Refused != nil {
		t.Fatalf("otad info of the offer with its root: %v", v.Refused)
	}
	if _, err := os.Stat(filepath.Join(tb.Cfg.StateDir, node.RootFile)); err == nil {
		t.Fatal("otad info kept the root the offer carries")
	}
	in := tb.Start(nil)
	o, err := in.D.Agent.Install(context.Background(), bare)
	devicetest.Must(t, err)
	if o.Code != ota.CodeBadSignature {
		in.Stop()
		in.Wait(t)
		t.Fatalf("the offer without its root: %+v, want bad_signature", o)
	}
	o, err = in.D.Agent.Install(context.Background(), env)
	devicetest.Must(t, err)
	if o.Result != ota.ResultStaged || o.SHA256 != sum {
		in.Stop()
		in.Wait(t)
		t.Fatalf("the offer with its root: %+v, want staged", o)
	}
	devicetest.Must(t, in.Wait(t)) // the sim device reboots
	if in.D.Keys.Version() != 2 {
		t.Errorf("trust version %d, want 2", in.D.Keys.Version())
	}
}
