package agent

import "github.com/otad/otad/ota"

func (m *machine) newest(t Target) {
	if t.IssuedAt.After(m.s.NewestIssuedAt) {
		m.s.NewestIssuedAt = t.IssuedAt
	}
}

// offer takes t; local says a person handed it over (an explicit act).
func (m *machine) offer(t Target, local bool) {
	sha := t.SHA256()
	booted := m.s.Slots[m.s.Booted]
	cur := m.s.Target
	m.newest(t)
	switch {
	case cur != nil && cur.SHA256() == sha:
		// The install in progress already converges there: nothing changes.
		if m.s.Pending != nil && !m.s.Pending.IssuedAt.After(t.IssuedAt) {
			m.s.Pending = nil // the desired state went back to this image
			m.emit(m.s.Phase, nil, "offer "+t.ID+" is the install in progress")
			return
		}
		m.notice(nil, "offer "+t.ID+" is the install in progress")
		return
	case m.s.Pending != nil && m.s.Pending.SHA256() == sha:
		m.notice(nil, "offer "+t.ID+" is already pending")
		return
	}
	if e, ok := m.ended(&t); ok && !reopens(e, t, local) {
		// What ends stays ended; only a newer offer tries the image again,
		// or an explicit act a retryable ending (docs/contract/installing.md).
		m.notice(nil, "offer "+t.ID+" already ended "+string(e.Result))
		return
	} else if ok {
		// Reopened: the automatic retries count afresh.
		t.Try = 0
		t.Retry = max(t.Retry, e.Retry)
	}
	// Accepted: an older refusal no longer says why nothing happens.
	m.s.LastRefusal = nil
	switch m.s.Phase {
	case ota.Idle:
		if booted.Status == ota.SlotGood && booted.SHA256 == sha {
			m.s.Pending = nil
			m.transition(ota.Idle, m.result(&t, ota.ResultUpToDate, "", "slot "+string(m.s.Booted)+" already runs this image"), "")
			return
		}
		m.s.Restarts = 0
		m.startInstall(t, "")
	case ota.Downloading, ota.Verifying:
		// Nothing is flipped yet: the newer offer preempts.
		m.do(CancelInstall{})
		old := m.result(cur, ota.ResultSuperseded, "", "superseded by "+t.ID)
		m.s.LastResult = old
		m.emit(m.s.Phase, old, "")
		m.s.Target = nil
		if booted.Status == ota.SlotGood && booted.SHA256 == sha {
			m.transition(ota.Idle, m.result(&t, ota.ResultUpToDate, "", "slot "+string(m.s.Booted)+" already runs this image"), "")
			return
		}
		m.s.Restarts = 0
		m.startInstall(t, "")
	default:
		// From staged on the boot env has changed: nothing preempts. The newest
		// offer waits, and replaces any older one waiting.
		m.s.Pending = &t
		m.stopRetrying() // an offer in its place drops any armed retry (retry.go)
		m.emit(m.s.Phase, nil, "offer "+t.ID+" waits until "+cur.ID+" is settled")
	}
}
