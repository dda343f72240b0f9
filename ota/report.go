package ota

import "time"

// Status is the status snapshot a device publishes (retained) and
// `otad status --json` prints; operator tools decode it with this same type.
type Status struct {
	Device     string   `json:"device"`
	Seq        uint64   `json:"seq"`
	BootID     string   `json:"boot_id"`
	State      Phase    `json:"state"`
	BootedSlot Slot     `json:"booted_slot"`
	Groups     []string `json:"groups,omitempty"` // the device's [mqtt] groups: how a rollout finds a group
	// Compatible is the device's compatible string (its config), in the
	// snapshot published over MQTT: `otactl publish` warns of an offer
	// the device would refuse as incompatible.
	Compatible string              `json:"compatible,omitempty"`
	Slots      map[Slot]SlotStatus `json:"slots"`
	Target     *TargetStatus       `json:"target,omitempty"`
	Pending    *TargetStatus       `json:"pending,omitempty"`
	LastResult *Outcome            `json:"last_result,omitempty"`
	// LastRefusal is the latest offer refused by the checks; refusals
	// never replace LastResult.
	LastRefusal  *Refusal `json:"last_refusal,omitempty"`
	AgentVersion string   `json:"agent_version"`
	// TrustVersion is the version of the root of trust the device holds
	// (docs/contract/trust.md); absent on a device that trusts keys_dir.
	TrustVersion uint64    `json:"trust_version,omitempty"`
	Time         time.Time `json:"time"`
	// Broker is the daemon's MQTT connection, in the answer to `otad
	// status` only (the control socket): never published.
	Broker *BrokerLink `json:"broker,omitempty"`
}

// BrokerLink is whether the daemon is connected to its broker now.
type BrokerLink struct {
	URL       string `json:"url"`
	Connected bool   `json:"connected"`
}

// Refusal is an offer the checks refused. ID and SHA256 (the image's) are
// set when the offer was authentic enough to be named.
type Refusal struct {
	ID     string `json:"id,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
	// ManifestSHA256 is the SHA-256 of the offer's manifest bytes, which
	// identify an offer (docs/contract/installing.md); set whenever the envelope decoded, even
	// when its signatures did not verify (ID and SHA256, from inside the
	// manifest, are then left out: they cannot be trusted).
	ManifestSHA256 string    `json:"manifest_sha256,omitempty"`
	Code           Code      `json:"code"`
	Message        string    `json:"message,omitempty"`
	Time           time.Time `json:"time"`
}

// SlotStatus is what a slot holds.
type SlotStatus struct {
	Version         string    `json:"version"`
	SHA256          string    `json:"sha256"`
	SecurityVersion uint64    `json:"security_version"`
	Status          SlotState `json:"status,omitempty"`
}

// TargetStatus describes the install in progress (or the pending offer).
type TargetStatus struct {
	ID      string `json:"id"`
	Version string `json:"version"`
	SHA256  string `json:"sha256"`
	// ManifestSHA256 names the offer being installed, as in Refusal: the
	// fleet side tells it from an earlier offer of the same image by it.
	ManifestSHA256 string `json:"manifest_sha256,omitempty"`
	BytesDone      int64  `json:"bytes_done"`
	BytesTotal     int64  `json:"bytes_total"`
	Transfer
	// Waiting says what the download waits for, while it waits.
	Waiting *Waiting `json:"waiting,omitempty"`
	// ConfirmingSince is when the agent first started on the new slot, by
	// the wall clock (shown only), and WindowLeftMS what is left of the
	// commit window's running time at Status.Time: in confirming only
	// (docs/contract/formats.md).
	ConfirmingSince time.Time `json:"confirming_since,omitzero"`
	WindowLeftMS    *int64    `json:"window_left_ms,omitempty"`
}

// Transfer says where an install's bytes came from: bytes fetched from the
// network (the payload as downloaded; for a chunked payload the indexes,
// the chunks and the deltas fetched), image bytes reused from the slots on
// the device, and image bytes rebuilt from deltas against the booted slot
// (a chunked payload, docs/contract/chunked.md); Path is how the install
// fetched them. Absent while zero.
type Transfer struct {
	Path         TransferPath `json:"path,omitempty"`
	BytesFetched int64        `json:"bytes_fetched,omitempty"`
	BytesReused  int64        `json:"bytes_reused,omitempty"`
	BytesDelta   int64        `json:"bytes_delta,omitempty"`
}

// TransferPath names how an install fetched its image.
type TransferPath string

// The paths an install takes.
const (
	PathStream  TransferPath = "stream"  // one stream (schema 1)
	PathChunked TransferPath = "chunked" // the chunks it does not hold
	PathDelta   TransferPath = "delta"   // and deltas against the booted slot's image
)

// Event is one transition, as published on the events topic. ID and SHA256
// name the offer concerned; Result, Code and Message are set for outcomes.
type Event struct {
	Device string    `json:"device"`
	Seq    uint64    `json:"seq"`
	BootID string    `json:"boot_id"`
	Time   time.Time `json:"time"`
	From   Phase     `json:"from"`
	To     Phase     `json:"to"`
	ID     string    `json:"id,omitempty"`
	SHA256 string    `json:"sha256,omitempty"`
	// ManifestSHA256 names the offer, as in Refusal (refused or ended).
	ManifestSHA256 string `json:"manifest_sha256,omitempty"`
	Result         Result `json:"result,omitempty"`
	Code           Code   `json:"code,omitempty"`
	Message        string `json:"message,omitempty"`
	// Retryable says the ending the event reports may start again
	// (docs/contract/installing.md).
	Retryable bool `json:"retryable,omitempty"`
	// Transfer is the install's, when the event names one.
	Transfer
}

// Progress is how far the install in progress has got, the one shape of
// every progress report: the slot writer's (Phase, bytes and Transfer),
// which the agent completes with the device, the install and the rate and
// publishes as the progress message (docs/contract/formats.md). BytesDone
// counts image bytes written to the slot (in Phase downloading) or read
// back (verifying) of BytesTotal, the image size. The message leaves the
// phase out: the status's state says it.
type Progress struct {
	Device         string  `json:"device"`
	ID             string  `json:"id"`
	SHA256         string  `json:"sha256"`
	Phase          Phase   `json:"-"`
	BytesDone      int64   `json:"bytes_done"`
	BytesTotal     int64   `json:"bytes_total"`
	BytesPerSecond float64 `json:"bytes_per_second"`
	Transfer
	// Waiting says what the download waits for, while it waits.
	Waiting *Waiting `json:"waiting,omitempty"`
}

// Waiting is a download that lost the network and waits to try again
// (docs/contract/installing.md): For what (WaitNetwork), the last error,
// since when, and when the next try starts.
type Waiting struct {
	For     string    `json:"for"`
	Error   string    `json:"error"`
	Since   time.Time `json:"since"`
	NextTry time.Time `json:"next_try"`
}

// WaitNetwork: the server could not be reached (refused, reset, DNS,
// timeouts, stalls).
const WaitNetwork = "network"
