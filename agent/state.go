// Package agent holds otad's install state machine, its journal and the loop that
// runs it. The machine itself (Step) is pure: events in, new state and effects out.
// Disk, network, bootloader and clock sit behind the small interfaces in deps.go.
package agent

import (
	"maps"
	"time"
)

// Phase is the agent's state; the strings are part of the contract (SPEC §6).
type Phase string

const (
	Idle        Phase = "idle"
	Downloading Phase = "downloading"
	Verifying   Phase = "verifying"
	Staged      Phase = "staged"
	Rebooting   Phase = "rebooting"
	Confirming  Phase = "confirming"
)

// Outcome results (SPEC §6).
const (
	ResultSuccess    = "success"
	ResultFailed     = "failed"
	ResultRolledBack = "rolled_back"
	ResultSuperseded = "superseded"
	ResultRejected   = "rejected"
	ResultUpToDate   = "up_to_date"
)

// Failure codes the agent itself produces; the rest come from verify and slots.
const (
	CodeHealthCheckFailed      = "health_check_failed"
	CodeRolledBackByBootloader = "rolled_back_by_bootloader"
	CodeCancelled              = "cancelled"
	CodeWriteFailed            = "write_failed"
)

// Slot status as the journal records it.
const (
	SlotUnknown = ""       // nothing known: never written by otad, or a write began
	SlotStaged  = "staged" // verified image, not yet committed
	SlotGood    = "good"   // committed (or the slot the device first booted)
	SlotBad     = "bad"    // rejected: failed health check, fell back, or marked bad
)

// SlotInfo is what the journal says a slot holds.
type SlotInfo struct {
	ID              string `json:"id,omitempty"`
	Version         string `json:"version"`
	SHA256          string `json:"sha256"`
	SecurityVersion uint64 `json:"security_version"`
	Status          string `json:"status,omitempty"`
}

// Payload says where an image comes from and what lands in the slot.
type Payload struct {
	URL          string `json:"url"`
	Compression  string `json:"compression"`
	Size         int64  `json:"size"`
	SHA256       string `json:"sha256"`
	DownloadSize int64  `json:"download_size,omitempty"`
}

// Target is an accepted offer: the install in progress, or the one waiting.
type Target struct {
	ID              string    `json:"id"`
	Version         string    `json:"version"`
	SecurityVersion uint64    `json:"security_version"`
	IssuedAt        time.Time `json:"issued_at"`
	Payload         Payload   `json:"payload"`
	Slot            string    `json:"slot,omitempty"` // set when the install starts
	BytesDone       int64     `json:"bytes_done"`
}

// SHA256 is the image digest; it identifies an image for idempotency.
func (t *Target) SHA256() string { return t.Payload.SHA256 }

// Result is the outcome of the last offer the agent finished with.
type Result struct {
	ID       string    `json:"id"`
	SHA256   string    `json:"sha256,omitempty"`
	IssuedAt time.Time `json:"issued_at,omitzero"`
	Result   string    `json:"result"`
	Code     string    `json:"code,omitempty"`
	Message  string    `json:"message,omitempty"`
}

// State is everything the agent knows; it is what the journal stores.
type State struct {
	Phase          Phase               `json:"state"`
	Target         *Target             `json:"target,omitempty"`
	Pending        *Target             `json:"pending,omitempty"`
	Slots          map[string]SlotInfo `json:"slots"`
	SecurityFloor  uint64              `json:"security_floor"`
	NewestIssuedAt time.Time           `json:"newest_issued_at,omitzero"`
	LastResult     *Result             `json:"last_result,omitempty"`
	Seq            uint64              `json:"seq"`
	BootID         string              `json:"boot_id"`
	Booted         string              `json:"booted_slot"`
	// Restarts counts how often the current install was interrupted (crash,
	// power cut) and started again; past MaxRestarts it is given up.
	Restarts int `json:"restarts,omitempty"`
	// InstallGen tells apart the completions of successive installs, so a
	// late report from a cancelled writer is never taken for the new one's.
	InstallGen uint64 `json:"install_gen"`
}

// Clone returns a deep copy, so a snapshot handed to an effect never changes.
func (s State) Clone() State {
	c := s
	c.Slots = maps.Clone(s.Slots)
	if c.Slots == nil {
		c.Slots = map[string]SlotInfo{}
	}
	if s.Target != nil {
		t := *s.Target
		c.Target = &t
	}
	if s.Pending != nil {
		p := *s.Pending
		c.Pending = &p
	}
	if s.LastResult != nil {
		r := *s.LastResult
		c.LastResult = &r
	}
	return c
}

func otherSlot(s string) string {
	if s == "A" {
		return "B"
	}
	return "A"
}
