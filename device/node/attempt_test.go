package node

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"

	"github.com/otad/otad/agent"
	"github.com/otad/otad/internal/testkit/signer"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/verify"
)

// Issue 27: the attempt counter `otactl publish --retry` puts outside the
// signature, through the real checks: a greater one reopens an offer whose
// download failed, a redelivery does not, and a final ending
// (health_check_failed) stays ended whatever the counter.
func TestAttemptCounterReopensOnlyRetryable(t *testing.T) {
	rel, err := signer.New()
	if err != nil {
		t.Fatal(err)
	}
	sign := func(id string, issued time.Duration) []byte {
		sum := sha256.Sum256([]byte(id))
		env, err := rel.Sign(signer.Offer{ID: id, Version: id, Compatible: "acme", URL: "https://u/" + id, Size: 4096,
			SHA256: hex.EncodeToString(sum[:]), Issued: fuzzNow.Add(issued)})
		if err != nil {
			t.Fatal(err)
		}
		return env
	}
	retry := func(raw []byte, n int64) []byte {
		b, err := verify.WithAttempt(raw, n)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	o := newOfferPath(t, rel)
	o.p.RetryAttempts = 0 // the agent's own retries are TestRetryBounded's
	// deliver checks raw and steps; it says whether an install started.
	deliver := func(raw []byte) bool {
		tg, err := o.chk.Check(raw, agent.FactsOf(o.s, o.s.Booted, time.Time{}))
		if err != nil {
			t.Fatalf("refused: %v", err)
		}
		next, fx := agent.Step(o.s, o.p, time.Time{}, agent.EvOffer{Target: tg})
		o.s = next
		for _, e := range fx {
			if _, ok := e.(agent.StartInstall); ok {
				return true
			}
		}
		return false
	}
	x := sign("rel-x", -time.Hour)
	if !deliver(x) {
		t.Fatal("x did not start")
	}
	o.s, _ = agent.Step(o.s, o.p, time.Time{}, agent.EvInstallDone{Gen: o.s.InstallGen, Code: ota.CodeDownloadFailed, Message: "404"})
	if r := o.s.LastResult; r == nil || !r.Retryable {
		t.Fatalf("download_failed is not retryable: %+v", r)
	}
	if deliver(x) {
		t.Fatal("a redelivery restarted a failed download")
	}
	if !deliver(retry(x, 7)) {
		t.Fatal("publish --retry (attempt 7) did not reopen download_failed")
	}
	o.s, _ = agent.Step(o.s, o.p, time.Time{}, agent.EvInstallDone{Gen: o.s.InstallGen, Code: ota.CodeDownloadFailed, Message: "404"})
	if deliver(retry(x, 7)) {
		t.Fatal("the same attempt counter replayed (retained) restarted it")
	}
	if !deliver(retry(x, 8)) {
		t.Fatal("a greater attempt counter did not reopen it")
	}
	// x now installs and fails its health check: final.
	slot, boot := o.s.Target.Slot, o.s.BootID+"'"
	for _, ev := range []agent.Event{agent.EvInstallDone{Gen: o.s.InstallGen}, agent.EvBoot{Booted: slot, BootID: boot},
		agent.EvHealth{OK: false, Message: "unhealthy"}, agent.EvBoot{Booted: slot.Other(), BootID: boot + "'"}} {
		o.s, _ = agent.Step(o.s, o.p, time.Time{}, ev)
	}
	if r := o.s.LastResult; r == nil || r.Code != ota.CodeHealthCheckFailed || r.Retryable {
		t.Fatalf("after the health check: %+v", r)
	}
	if deliver(retry(x, 99)) {
		t.Fatal("publish --retry reopened health_check_failed")
	}
}

// Issue 27: [download] schemes binds the signed URLs, which a payload given
// by hand replaces: such an offer is not refused for its signed scheme.
func TestSchemesDoNotBindAGivenPayload(t *testing.T) {
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
	o.chk.policy.Schemes = []string{"file"}
	f := agent.FactsOf(o.s, o.s.Booted, time.Time{})
	if _, err := o.chk.Check(x, f); ota.CodeOf(err) != ota.CodeURLNotAllowed {
		t.Fatalf("signed https under schemes [file]: %v, want url_not_allowed", err)
	}
	f.PayloadGiven = true
	if _, err := o.chk.Check(x, f); err != nil {
		t.Fatalf("with a payload given: %v", err)
	}
}
