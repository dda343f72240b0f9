package rollout

import "github.com/otad/otad/ota"

// Outcome is what came of an offer on one device: whether it ended there,
// and how. OutcomeOf is the one rule that decides it on the fleet side: the
// controller (Step), the fleet view following an offer (fleetview), the demo
// and the fleet benchmark all ask it.
type Outcome struct {
	// Result is how the offer ended: one of the agent's end results
	// (docs/contract/installing.md), TimedOut when the controller stopped
	// waiting, or "" while it is pending.
	Result  ota.Result
	Code    ota.Code // the device's reason for a failure or a refusal
	Message string
	// Settled: the device is done with the offer. It is idle on a slot it
	// vouches for, or it refused the offer. A device that rejected the slot
	// it booted reports "idle, failed" once before it reboots out of it: the
	// offer has ended there, but the device has not settled yet.
	Settled bool
}

// Ended reports whether the offer ended on the device.
func (o Outcome) Ended() bool { return o.Result != "" }

// String is the outcome as tables show it: "success",
// "failed/health_check_failed", "pending".
func (o Outcome) String() string {
	s := string(o.Result)
	if s == "" {
		s = "pending"
	}
	if o.Code != "" {
		s += "/" + string(o.Code)
	}
	return s
}

// OutcomeOf is what a device's status says came of offer (docs/contract/rollouts.md,
// rule 3). An offer is its signed manifest: a result or a refusal counts
// when it carries the manifest's SHA-256 and it is the offer's; one
// without it (an older agent) counts when it has the offer's id and, when
// given, its payload sha256. A device whose target or pending offer is this
// one installs it: it is pending, whatever its last result says (an
// earlier offer of the same image, signed again, has the same id and
// payload). A refusal by the offer checks is in last_refusal, never
// last_result (docs/contract/mqtt.md): one naming this offer is rejected,
// unless the device already has or wants something newer (stale,
// downgrade), which is superseded, not a failure. A result for the offer
// wins over a refusal of it (the retained offer delivered again after the
// install is refused as already ended). Staged and pending are not ends:
// the install goes on; nor is an ending the agent retries by itself
// (last_result.retrying: a download that failed, with retries left): its
// retry's result is the outcome, and device_timeout bounds the wait.
func OutcomeOf(st ota.Status, offer Ref) Outcome {
	if r := st.LastResult; r != nil && offer.Names(r.ID, r.SHA256, r.ManifestSHA256) {
		if r.Retrying {
			return Outcome{}
		}
		switch r.Result {
		case ota.ResultRejected:
			return Outcome{Result: rejected(r.Code), Code: r.Code, Message: r.Message, Settled: settled(st)}
		case ota.ResultSuccess, ota.ResultUpToDate, ota.ResultFailed, ota.ResultRolledBack, ota.ResultSuperseded:
			if !offer.installing(st, r.ManifestSHA256) {
				return Outcome{Result: r.Result, Code: r.Code, Message: r.Message, Settled: settled(st)}
			}
		}
		return Outcome{}
	}
	if offer.installing(st, "") {
		return Outcome{}
	}
	if r := st.LastRefusal; r != nil && (r.ID != "" || r.ManifestSHA256 != "") && offer.Names(r.ID, r.SHA256, r.ManifestSHA256) {
		return Outcome{Result: rejected(r.Code), Code: r.Code, Message: r.Message, Settled: true}
	}
	return Outcome{}
}

// Names reports whether a report naming id, sha256 and manifest (the
// manifest's digest) is about the offer: by the digest when both sides
// have it; else the same id, and the same sha256 unless one side gives
// none (a follower that knows only the offer's id matches on it alone).
func (r Ref) Names(id, sha256, manifest string) bool {
	if manifest != "" && r.ManifestSHA256 != "" {
		return manifest == r.ManifestSHA256
	}
	return id != "" && id == r.ID && (sha256 == "" || r.SHA256 == "" || sha256 == r.SHA256)
}

// installing reports whether the device's target or pending offer is this
// one, other than the offer whose digest is ended (a result that names
// the target itself is its end, not an earlier offer's).
func (r Ref) installing(st ota.Status, ended string) bool {
	for _, t := range []*ota.TargetStatus{st.Target, st.Pending} {
		if t != nil && r.Names(t.ID, t.SHA256, t.ManifestSHA256) && (ended == "" || t.ManifestSHA256 != ended) {
			return true
		}
	}
	return false
}

// rejected is the outcome of a refusal with code.
func rejected(code ota.Code) ota.Result {
	if code == ota.CodeStale || code == ota.CodeDowngrade {
		return ota.ResultSuperseded
	}
	return ota.ResultRejected
}

// settled: idle, running a slot the agent vouches for.
func settled(st ota.Status) bool {
	return st.State == ota.Idle && st.Slots[st.BootedSlot].Status == ota.SlotGood
}
