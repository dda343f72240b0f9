package agent

import "time"

// Status is the status snapshot of SPEC §8, as published retained and as
// printed by `otad status --json`.
type Status struct {
	Device       string                `json:"device"`
	Seq          uint64                `json:"seq"`
	BootID       string                `json:"boot_id"`
	State        Phase                 `json:"state"`
	BootedSlot   string                `json:"booted_slot"`
	Slots        map[string]SlotStatus `json:"slots"`
	Target       *TargetStatus         `json:"target,omitempty"`
	Pending      *TargetStatus         `json:"pending,omitempty"`
	LastResult   *ResultStatus         `json:"last_result,omitempty"`
	AgentVersion string                `json:"agent_version"`
	Time         time.Time             `json:"time"`
}

// SlotStatus is what a slot holds.
type SlotStatus struct {
	Version         string `json:"version"`
	SHA256          string `json:"sha256"`
	SecurityVersion uint64 `json:"security_version"`
	Status          string `json:"status,omitempty"`
}

// TargetStatus describes the install in progress (or the pending offer).
type TargetStatus struct {
	ID         string `json:"id"`
	Version    string `json:"version"`
	SHA256     string `json:"sha256"`
	BytesDone  int64  `json:"bytes_done"`
	BytesTotal int64  `json:"bytes_total"`
}

// ResultStatus is the last outcome.
type ResultStatus struct {
	ID      string `json:"id"`
	SHA256  string `json:"sha256,omitempty"`
	Result  string `json:"result"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
}

// EventMsg is one transition (SPEC §8 events topic).
type EventMsg struct {
	Device  string    `json:"device"`
	Seq     uint64    `json:"seq"`
	BootID  string    `json:"boot_id"`
	Time    time.Time `json:"time"`
	From    Phase     `json:"from"`
	To      Phase     `json:"to"`
	ID      string    `json:"id,omitempty"`
	SHA256  string    `json:"sha256,omitempty"`
	Result  string    `json:"result,omitempty"`
	Code    string    `json:"code,omitempty"`
	Message string    `json:"message,omitempty"`
}

// ProgressMsg is a progress report (SPEC §8 progress topic).
type ProgressMsg struct {
	Device         string  `json:"device"`
	ID             string  `json:"id"`
	SHA256         string  `json:"sha256"`
	BytesDone      int64   `json:"bytes_done"`
	BytesTotal     int64   `json:"bytes_total"`
	BytesPerSecond float64 `json:"bytes_per_second"`
}

// Snapshot renders a State as the status snapshot.
func Snapshot(device, agentVersion string, s State, now time.Time) Status {
	st := Status{
		Device: device, Seq: s.Seq, BootID: s.BootID, State: s.Phase, BootedSlot: s.Booted,
		Slots: map[string]SlotStatus{}, AgentVersion: agentVersion, Time: now.UTC(),
	}
	if st.State == "" {
		st.State = Idle
	}
	for _, name := range []string{"A", "B"} {
		si := s.Slots[name]
		st.Slots[name] = SlotStatus{Version: si.Version, SHA256: si.SHA256, SecurityVersion: si.SecurityVersion, Status: si.Status}
	}
	if t := s.Target; t != nil {
		st.Target = targetStatus(t)
	}
	if p := s.Pending; p != nil {
		st.Pending = targetStatus(p)
	}
	if r := s.LastResult; r != nil {
		st.LastResult = &ResultStatus{ID: r.ID, SHA256: r.SHA256, Result: r.Result, Code: r.Code, Message: r.Message}
	}
	return st
}

func targetStatus(t *Target) *TargetStatus {
	return &TargetStatus{ID: t.ID, Version: t.Version, SHA256: t.SHA256(), BytesDone: t.BytesDone, BytesTotal: t.Payload.Size}
}

// eventMsg renders a Record for the events topic.
func eventMsg(device, bootID string, r Record, now time.Time) EventMsg {
	return EventMsg{Device: device, Seq: r.Seq, BootID: bootID, Time: now.UTC(), From: r.From, To: r.To,
		ID: r.ID, SHA256: r.SHA256, Result: r.Result, Code: r.Code, Message: r.Message}
}
