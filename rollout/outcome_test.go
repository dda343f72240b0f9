package rollout

import (
	"strings"
	"testing"

	"github.com/otad/otad/ota"
)

func TestOutcome(t *testing.T) {
	ours := Ref{ID: testOffer.ID, SHA256: testOffer.SHA256}
	refusal := func(id, sha string, code ota.Code) *ota.Refusal { return &ota.Refusal{ID: id, SHA256: sha, Code: code} }
	result := func(id, sha string, r ota.Result) *ota.Outcome { return &ota.Outcome{ID: id, SHA256: sha, Result: r} }
	tests := []struct {
		name string
		st   ota.Status
		want ota.Result
	}{
		{"nothing", ota.Status{}, ""},
		{"success", ota.Status{LastResult: result(ours.ID, ours.SHA256, ota.ResultSuccess)}, ota.ResultSuccess},
		{"staged is no end", ota.Status{LastResult: result(ours.ID, ours.SHA256, ota.ResultStaged)}, ""},
		{"refused in last_refusal", ota.Status{LastRefusal: refusal(ours.ID, ours.SHA256, ota.CodeBadSignature)}, ota.ResultRejected},
		{"refused as stale", ota.Status{LastRefusal: refusal(ours.ID, "", ota.CodeStale)}, ota.ResultSuperseded},
		{"a refusal naming no offer", ota.Status{LastRefusal: refusal("", "", ota.CodeBadEnvelope)}, ""},
		{"a refusal of another image", ota.Status{LastRefusal: refusal(ours.ID, oldRef.SHA256, ota.CodeBadSignature)}, ""},
		{"the result wins over a later refusal of the same offer", ota.Status{
			LastResult: result(ours.ID, ours.SHA256, ota.ResultSuccess), LastRefusal: refusal(ours.ID, ours.SHA256, ota.CodeStale)}, ota.ResultSuccess},
		{"an old result and a refusal of ours", ota.Status{
			LastResult: result(oldRef.ID, oldRef.SHA256, ota.ResultSuccess), LastRefusal: refusal(ours.ID, ours.SHA256, ota.CodeIncompatible)}, ota.ResultRejected},
	}
	for _, tc := range tests {
		if got := OutcomeOf(tc.st, ours); got.Result != tc.want || got.Ended() != (tc.want != "") {
			t.Errorf("%s: %+v, want %q", tc.name, got, tc.want)
		}
	}
}

// The same image signed again (a new issued_at, so a new manifest and a new
// digest) after its first offer failed: the id and the payload are the same,
// the manifest's digest tells the offers apart (docs/contract/rollouts.md,
// rule 3). Issue 27: rollout fw-2_0b halted on fw-2_0's 404.
func TestOutcomeOfAnOfferSignedAgain(t *testing.T) {
	first, again := strings.Repeat("1", 64), strings.Repeat("2", 64)
	ours := Ref{ID: testOffer.ID, SHA256: testOffer.SHA256, ManifestSHA256: again}
	failed := func(manifest string) *ota.Outcome {
		return &ota.Outcome{ID: ours.ID, SHA256: ours.SHA256, ManifestSHA256: manifest, Result: ota.ResultFailed, Code: ota.CodeDownloadFailed}
	}
	retrying := func(r *ota.Outcome) *ota.Outcome { r.Retryable, r.Retrying = true, true; return r }
	target := func(manifest string) *ota.TargetStatus {
		return &ota.TargetStatus{ID: ours.ID, SHA256: ours.SHA256, ManifestSHA256: manifest}
	}
	tests := []struct {
		name string
		st   ota.Status
		want ota.Result
	}{
		{"the first offer's failure, the device idle", ota.Status{State: ota.Idle, LastResult: failed(first)}, ""},
		{"the first offer's failure while it installs ours", ota.Status{State: ota.Downloading, Target: target(again), LastResult: failed(first)}, ""},
		{"an older agent's failure (no digest) while it installs ours", ota.Status{State: ota.Downloading, Target: target(again), LastResult: failed("")}, ""},
		{"an older agent installing (no digest in the target or the result)", ota.Status{State: ota.Downloading, Target: target(""), LastResult: failed("")}, ""},
		{"the first offer's failure while ours is pending", ota.Status{State: ota.Rebooting, Target: &ota.TargetStatus{ID: "other"}, Pending: target(again), LastResult: failed(first)}, ""},
		{"ours failed", ota.Status{State: ota.Idle, LastResult: failed(again)}, ota.ResultFailed},
		// The agent retries a download that failed by itself (docs/contract/rollouts.md,
		// rule 3): its retry's result is the outcome, not this one.
		{"ours failed, the agent retrying it", ota.Status{State: ota.Idle, LastResult: retrying(failed(again))}, ""},
		{"an older agent's failure, the agent retrying it", ota.Status{State: ota.Idle, LastResult: retrying(failed(""))}, ""},
		{"an older agent's failure, nothing installing", ota.Status{State: ota.Idle, LastResult: failed("")}, ota.ResultFailed},
		{"the first offer refused", ota.Status{State: ota.Idle, LastRefusal: &ota.Refusal{ID: ours.ID, SHA256: ours.SHA256, ManifestSHA256: first, Code: ota.CodeExpired}}, ""},
		{"ours refused before its signature verified (the digest alone names it)", ota.Status{State: ota.Idle,
			LastRefusal: &ota.Refusal{ManifestSHA256: again, Code: ota.CodeBadSignature}}, ota.ResultRejected},
		{"ours refused while installing it (a redelivery)", ota.Status{State: ota.Downloading, Target: target(again),
			LastRefusal: &ota.Refusal{ID: ours.ID, SHA256: ours.SHA256, ManifestSHA256: again, Code: ota.CodeStale}}, ""},
	}
	for _, tc := range tests {
		if got := OutcomeOf(tc.st, ours); got.Result != tc.want || got.Ended() != (tc.want != "") {
			t.Errorf("%s: %+v, want %q", tc.name, got, tc.want)
		}
	}
}

// How an outcome is told and when a device is done with the offer: the
// fleet view's follower and the benchmark wait for settled devices, the
// controller takes an outcome as soon as it is known.
func TestOutcomeSettledAndCode(t *testing.T) {
	good := map[ota.Slot]ota.SlotStatus{"A": {Version: "1", Status: ota.SlotGood}, "B": {Version: "2", Status: ota.SlotGood}}
	aBad := map[ota.Slot]ota.SlotStatus{"A": {Version: "2", Status: ota.SlotBad}, "B": {Version: "1", Status: ota.SlotGood}}
	failed := &ota.Outcome{ID: testOffer.ID, Result: ota.ResultFailed, Code: ota.CodeHealthCheckFailed, Message: "exit 1"}
	tests := []struct {
		name  string
		st    ota.Status
		offer Ref
		want  Outcome
		text  string
	}{
		{"pending", ota.Status{State: ota.Downloading, BootedSlot: "B", Slots: good}, Ref{ID: testOffer.ID}, Outcome{}, "pending"},
		{"failed, not yet rebooted out of the bad slot", ota.Status{State: ota.Idle, BootedSlot: "A", Slots: aBad, LastResult: failed},
			Ref{ID: testOffer.ID}, Outcome{Result: ota.ResultFailed, Code: ota.CodeHealthCheckFailed, Message: "exit 1"}, "failed/health_check_failed"},
		{"failed and back on the good slot", ota.Status{State: ota.Idle, BootedSlot: "B", Slots: aBad, LastResult: failed},
			Ref{ID: testOffer.ID}, Outcome{Result: ota.ResultFailed, Code: ota.CodeHealthCheckFailed, Message: "exit 1", Settled: true}, "failed/health_check_failed"},
		{"success while the next install downloads", ota.Status{State: ota.Downloading, BootedSlot: "B", Slots: good,
			LastResult: &ota.Outcome{ID: testOffer.ID, SHA256: testOffer.SHA256, Result: ota.ResultSuccess}},
			Ref{ID: testOffer.ID, SHA256: testOffer.SHA256}, Outcome{Result: ota.ResultSuccess}, "success"},
		{"a refusal is settled whatever the device does", ota.Status{State: ota.Downloading,
			LastRefusal: &ota.Refusal{ID: testOffer.ID, Code: ota.CodeDowngrade, Message: "older"}},
			Ref{ID: testOffer.ID, SHA256: testOffer.SHA256}, Outcome{Result: ota.ResultSuperseded, Code: ota.CodeDowngrade, Message: "older", Settled: true}, "superseded/downgrade"},
		{"a ref with no sha256 matches on the id", ota.Status{State: ota.Idle, BootedSlot: "B", Slots: good,
			LastResult: &ota.Outcome{ID: testOffer.ID, SHA256: testOffer.SHA256, Result: ota.ResultSuccess}},
			Ref{ID: testOffer.ID}, Outcome{Result: ota.ResultSuccess, Settled: true}, "success"},
		{"another id", ota.Status{State: ota.Idle, BootedSlot: "B", Slots: good,
			LastResult: &ota.Outcome{ID: oldRef.ID, Result: ota.ResultSuccess}}, Ref{ID: testOffer.ID}, Outcome{}, "pending"},
	}
	for _, tc := range tests {
		got := OutcomeOf(tc.st, tc.offer)
		if got != tc.want || got.String() != tc.text {
			t.Errorf("%s: %+v (%q), want %+v (%q)", tc.name, got, got, tc.want, tc.text)
		}
	}
}
