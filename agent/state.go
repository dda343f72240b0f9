package agent

import (
	"maps"
	"slices"
	"time"

	"github.com/otad/otad/ota"
)

// SlotInfo is what the journal says a slot holds.
type SlotInfo struct {
	ID              string        `json:"id,omitempty"`
	Version         string        `json:"version"`
	SHA256          string        `json:"sha256"`
	SecurityVersion uint64        `json:"security_version"`
	Status          ota.SlotState `json:"status,omitempty"`
	// Envelope is the offer the image was installed from, kept while the
	// slot holds it: otad mark-active other checks its signatures again
	// before the slot becomes primary (docs/contract/trust.md rule 6).
	// None for an image otad did not install (the factory image).
	Envelope []byte `json:"envelope,omitempty"`
}

// Target is an accepted offer: the install in progress, or the one waiting.
type Target struct {
	ID              string    `json:"id"`
	Version         string    `json:"version"`
	SecurityVersion uint64    `json:"security_version"`
	IssuedAt        time.Time `json:"issued_at"`
	// ExpiresAt is the offer's expires_at: a download that lost the network
	// waits for it until then (docs/contract/installing.md).
	ExpiresAt time.Time   `json:"expires_at,omitzero"`
	Payload   ota.Payload `json:"payload"`
	Slot      ota.Slot    `json:"slot,omitempty"` // set when the install starts
	BytesDone int64       `json:"bytes_done"`
	// Transfer is what the install fetched and reused so far.
	ota.Transfer
	// ConfirmingSince is when the agent first started on the new slot, by
	// the wall clock: for display only.
	ConfirmingSince time.Time `json:"confirming_since,omitzero"`
	// Confirming is the new slot's running time so far: the commit window
	// counts it, across agent restarts and reboots (runtime.go).
	Confirming RunTime `json:"confirming,omitzero"`
	// ManifestSHA256 identifies the offer (docs/contract/installing.md): an ended one never starts again.
	ManifestSHA256 string `json:"manifest_sha256,omitempty"`
	// Envelope is the offer as received, kept while it is pending (it is
	// checked again when it is taken up) and while it installs (its
	// signatures are checked again before the flip).
	Envelope []byte `json:"envelope,omitempty"`
	// Try is which automatic retry of a retryable ending this install is
	// (0: the offer's first install, or one an explicit act reopened).
	Try int `json:"try,omitempty"`
	// Retry is the attempt counter the offer came with, outside the
	// signature (docs/contract/formats.md): a greater one reopens a retryable ending.
	Retry int64 `json:"retry,omitempty"`
	// PayloadGiven says the payload is read from where a person gave it
	// (otad install --payload): a mismatch is that file's, not the offer's.
	PayloadGiven bool `json:"payload_given,omitempty"`
	// Drop is an operator's drop of this install past its flip, journaled
	// before the bootloader hears it (undo.go): "mark-active" or "mark-bad".
	Drop string `json:"drop,omitempty"`
}

// SHA256 is the image digest; it identifies an image for idempotency.
func (t *Target) SHA256() string { return t.Payload.SHA256 }

// State is everything the agent knows; it is what the journal stores.
type State struct {
	Phase          ota.Phase             `json:"state"`
	Target         *Target               `json:"target,omitempty"`
	Pending        *Target               `json:"pending,omitempty"`
	Slots          map[ota.Slot]SlotInfo `json:"slots"`
	SecurityFloor  uint64                `json:"security_floor"`
	NewestIssuedAt time.Time             `json:"newest_issued_at,omitzero"`
	LastResult     *ota.Outcome          `json:"last_result,omitempty"`
	Seq            uint64                `json:"seq"`
	BootID         string                `json:"boot_id"`
	Booted         ota.Slot              `json:"booted_slot"`
	// Restarts counts how often the current install was interrupted (crash,
	// power cut) and started again; past MaxRestarts it is given up.
	Restarts int `json:"restarts,omitempty"`
	// InstallGen tells apart the completions of successive installs, so a
	// late report from a cancelled writer is never taken for the new one's.
	InstallGen uint64 `json:"install_gen"`
	// Ended are the latest offers that came to an outcome (ended.go).
	Ended []Ended `json:"ended,omitempty"`
	// LastRefusal is the latest refused offer; refusals never replace LastResult.
	LastRefusal *ota.Refusal `json:"last_refusal,omitempty"`
	// SeqMark is a seq no event has used yet, journaled ahead: refusals take
	// seqs below it without a journal write each (flash wear).
	SeqMark uint64 `json:"seq_mark,omitempty"`
}

// Clone returns a deep copy, so a snapshot handed to an effect never changes.
func (s State) Clone() State {
	c := s
	c.Slots = maps.Clone(s.Slots)
	if c.Slots == nil {
		c.Slots = map[ota.Slot]SlotInfo{}
	}
	c.Target, c.Pending = clonePtr(s.Target), clonePtr(s.Pending)
	c.LastResult, c.LastRefusal = clonePtr(s.LastResult), clonePtr(s.LastRefusal)
	c.Ended = slices.Clone(s.Ended)
	return c
}

// clonePtr copies what p points to; nil stays nil.
func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	c := *p
	return &c
}
