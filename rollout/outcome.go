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
// rule 3). Only a result for this offer counts: the same manifest id, and
// the same payload sha256 when both the status and offer give one; a result
// for an earlier image is not an outcome of this offer. A refusal by the
// offer checks is in last_refusal, never last_result (docs/contract/mqtt.md):
// one naming this offer is rejected, unless the device already has or wants
// something newer (stale, downgrade), which is superseded, not a failure. A
// result for the offer wins over a refusal of it (the retained offer
// delivered again after the install is refused as already ended). Staged
// and pending are not ends: the install goes on.
func OutcomeOf(st ota.Status, offer Ref) Outcome {
	if r := st.LastResult; r != nil && offer.names(r.ID, r.SHA256) {
		switch r.Result {
		case ota.ResultRejected:
			return Outcome{Result: rejected(r.Code), Code: r.Code, Message: r.Message, Settled: settled(st)}
		case ota.ResultSuccess, ota.ResultUpToDate, ota.ResultFailed, ota.ResultRolledBack, ota.ResultSuperseded:
			return Outcome{Result: r.Result, Code: r.Code, Message: r.Message, Settled: settled(st)}
		}
		return Outcome{}
	}
	if r := st.LastRefusal; r != nil && r.ID != "" && offer.names(r.ID, r.SHA256) {
		return Outcome{Result: rejected(r.Code), Code: r.Code, Message: r.Message, Settled: true}
	}
	return Outcome{}
}

// names reports whether id and sha256 name the offer: the same id, and the
// same sha256 unless one side gives none (a follower that knows only the
// offer's id matches on it alone).
func (r Ref) names(id, sha256 string) bool {
	return id == r.ID && (sha256 == "" || r.SHA256 == "" || sha256 == r.SHA256)
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
