package rollout

import (
	"fmt"
	"slices"
	"time"

	"github.com/otad/otad/ota"
)

// Input is one thing Step reacts to.
type Input interface{ isInput() }

// Observe is the fleet as seen now. Every judgement (outcomes, timeouts,
// halts, wave ends and starts) happens on an Observe with a ready view.
type Observe struct{ View View }

// Offered tells Step that every offer of wave Wave (from 1) is published.
type Offered struct{ Wave int }

func (Observe) isInput() {}
func (Command) isInput() {}
func (Offered) isInput() {}

// Action is an instruction to the driver, carried out in order.
type Action interface{ isAction() }

// PublishState publishes the state retained. It comes first in a batch:
// a wave's members are on record before any of them is offered.
type PublishState struct{ State State }

// Offer publishes the plan's offer retained on each device's desired topic;
// the driver answers with Offered once all are out. Offers are the same
// bytes every time, so publishing them again after a crash is harmless.
type Offer struct {
	Wave    int
	Devices []string
}

// Halt says the halt rule stopped the rollout.
type Halt struct{ Reason string }

// Finish says the last wave ended.
type Finish struct{}

// Abort says an operator aborted the rollout.
type Abort struct{ Reason string }

func (PublishState) isAction() {}
func (Offer) isAction()        {}
func (Halt) isAction()         {}
func (Finish) isAction()       {}
func (Abort) isAction()        {}

// Step is the rollout controller's whole logic: the state, the plan, one
// input and the time in; the new state and what to do out. It has no side
// effects, so every rule is a table test and a restarted controller given
// the retained state continues exactly where the last one was.
func Step(s State, p *Plan, in Input, now time.Time) (State, []Action) {
	m := &machine{s: s.clone(), p: p, now: now.UTC()}
	switch in := in.(type) {
	case Observe:
		m.observe(in.View)
	case Command:
		m.command(in)
	case Offered:
		m.offered(in.Wave)
	}
	return m.done(s)
}

type machine struct {
	s       State
	p       *Plan
	now     time.Time
	changed bool
	wait    string // why the next wave cannot start, when that is news
	acts    []Action
}

func (m *machine) note(format string, args ...any) {
	m.s.History = append(m.s.History, Change{Time: m.now, Event: fmt.Sprintf(format, args...)})
	if n := len(m.s.History); n > maxHistory {
		m.s.History = slices.Delete(m.s.History, 0, n-maxHistory)
	}
	m.changed = true
}

// done settles the headline and prepends PublishState when anything changed.
func (m *machine) done(old State) (State, []Action) {
	m.recount()
	m.s.Phase, m.s.Reason = m.headline(old)
	if m.s.Phase != old.Phase || m.s.Reason != old.Reason || m.s.Counts != old.Counts {
		m.changed = true
	}
	if !m.changed {
		return old, m.acts
	}
	m.s.Updated = m.now
	return m.s, append([]Action{PublishState{State: m.s}}, m.acts...)
}

func (m *machine) headline(old State) (string, string) {
	s := &m.s
	switch {
	case s.Finished != nil:
		return PhaseFinished, s.Finished.Reason
	case s.Aborted != nil:
		return PhaseAborted, s.Aborted.Reason
	case s.Halted != nil:
		return PhaseHalted, s.Halted.Reason
	case s.Paused != nil:
		return PhasePaused, s.Paused.Reason
	}
	cur := m.current()
	if cur != nil && cur.Ended.IsZero() {
		return PhaseRunning, ""
	}
	phase, reason := PhaseWaiting, ""
	if cur != nil {
		phase = PhaseSoaking
		reason = fmt.Sprintf("wave %d starts after its soak, at %s", s.Wave+1,
			cur.Ended.Add(m.p.Waves[s.Wave-1].Soak).Format(time.RFC3339))
	}
	switch {
	case m.wait != "":
		reason = m.wait
	case phase == old.Phase:
		reason = old.Reason // what was said stands until there is news
	}
	return phase, reason
}

func (m *machine) current() *WaveState {
	if len(m.s.Waves) == 0 {
		return nil
	}
	return &m.s.Waves[len(m.s.Waves)-1]
}

func (m *machine) recount() {
	var all Counts
	for i := range m.s.Waves {
		w := &m.s.Waves[i]
		var c Counts
		for _, o := range w.Devices {
			c.add(o)
			all.add(o)
		}
		w.Counts = c
	}
	m.s.Counts = all
}

func (m *machine) observe(v View) {
	if m.s.Terminal() || !v.Ready {
		return // nothing is judged before the fleet has been seen
	}
	m.record(v)
	m.recount()
	m.judge(false)
	for {
		m.endWave()
		m.finishIfDone()
		if !m.startNext(v) {
			break
		}
	}
	m.resend()
}

// record takes outcomes from the statuses of offered devices, and times out
// the ones that have none after device_timeout. A decided outcome stays; a
// device that reports after it timed out replaces the timeout.
func (m *machine) record(v View) {
	for i := range m.s.Waves {
		w := &m.s.Waves[i]
		if w.Offered.IsZero() {
			continue
		}
		for d, out := range w.Devices {
			if out != "" && out != TimedOut {
				continue
			}
			if st, ok := v.Devices[d]; ok {
				if o := OutcomeOf(st, m.s.Offer); o.Ended() {
					w.Devices[d] = o.Result
					m.changed = true
					continue
				}
			}
			if out == "" && !m.now.Before(w.Offered.Add(m.p.Halt.DeviceTimeout)) {
				w.Devices[d] = TimedOut
				m.changed = true
			}
		}
	}
}

// judge applies the halt rule: failed, rolled back, rejected and timed out
// devices over devices with an outcome, across the rollout, above
// max_failed_percent. It judges once min_outcomes outcomes are in, and at
// every wave end whatever the number (so a canary wave smaller than
// min_outcomes is judged). After a resume it judges again only when more
// devices than the operator accepted have failed.
func (m *machine) judge(waveEnd bool) {
	if m.s.Halted != nil {
		return
	}
	c := m.s.Counts
	out, bad := c.Outcomes(), c.Bad()
	if out == 0 || bad <= m.s.AcceptedBad || (out < m.p.Halt.MinOutcomes && !waveEnd) {
		return
	}
	if float64(bad)*100 <= m.p.Halt.MaxFailedPercent*float64(out) {
		return
	}
	reason := fmt.Sprintf("%d of %d devices with an outcome failed (%.1f%%), above max_failed_percent %v",
		bad, out, float64(bad)*100/float64(out), m.p.Halt.MaxFailedPercent)
	if out < m.p.Halt.MinOutcomes {
		reason += fmt.Sprintf("; judged at the end of wave %d with fewer than min_outcomes %d", m.s.Wave, m.p.Halt.MinOutcomes)
	}
	m.s.Halted = &Mark{Time: m.now, Reason: reason}
	m.note("halted in wave %d: %s", m.s.Wave, reason)
	m.acts = append(m.acts, Halt{Reason: reason})
}

// endWave ends the current wave once it is offered and each of its devices
// has an outcome or timed out. Nothing else ends a wave (a pause does not).
func (m *machine) endWave() {
	w := m.current()
	if w == nil || w.Offered.IsZero() || !w.Ended.IsZero() {
		return
	}
	for _, o := range w.Devices {
		if o == "" {
			return
		}
	}
	w.Ended = m.now
	m.recount()
	c := w.Counts
	m.note("wave %d ended: %d devices, %d success, %d up_to_date, %d failed, %d rolled_back, %d rejected, %d superseded, %d timed_out",
		m.s.Wave, c.Devices, c.Success, c.UpToDate, c.Failed, c.RolledBack, c.Rejected, c.Superseded, c.TimedOut)
	m.judge(true)
}

func (m *machine) finishIfDone() {
	w := m.current()
	if m.s.Finished != nil || m.s.Halted != nil || m.s.Wave < len(m.p.Waves) || w == nil || w.Ended.IsZero() {
		return
	}
	c := m.s.Counts
	m.s.Finished = &Mark{Time: m.now, Reason: fmt.Sprintf("all %d waves ended: %d devices, %d failed", len(m.p.Waves), c.Devices, c.Bad())}
	m.note("finished: %s", m.s.Finished.Reason)
	m.acts = append(m.acts, Finish{})
}

// startNext starts the next wave when the current one has ended and soaked
// and nothing holds the rollout. It reports whether it started one.
func (m *machine) startNext(v View) bool {
	s := &m.s
	if s.Terminal() || s.Halted != nil || s.Paused != nil || s.Wave >= len(m.p.Waves) {
		return false
	}
	if w := m.current(); w != nil && (w.Ended.IsZero() || m.now.Before(w.Ended.Add(m.p.Waves[s.Wave-1].Soak))) {
		return false
	}
	i := s.Wave
	group := GroupDevices(v, m.p.Group)
	if m.p.Waves[i].Devices == nil && len(group) == 0 {
		// A percent of nobody would end the wave at once and finish the
		// rollout having offered nothing: wait for the group to be seen.
		m.wait = fmt.Sprintf("wave %d waits: no device's status lists group %q", i+1, m.p.Group)
		return false
	}
	taken := map[string]bool{}
	for _, w := range s.Waves {
		for d := range w.Devices {
			taken[d] = true
		}
	}
	members := Members(m.p, i, group, taken)
	w := WaveState{Started: m.now, Devices: make(map[string]ota.Result, len(members))}
	for _, d := range members {
		w.Devices[d] = ""
	}
	if len(members) == 0 {
		w.Offered = m.now // nothing to send: the wave ends at once
	}
	s.Waves = append(s.Waves, w)
	s.Wave = i + 1
	m.note("wave %d started: %d devices", s.Wave, len(members))
	return true
}

// resend asks for the current wave's offers while they are not confirmed
// published (the first time, and again after a crash or a failed publish),
// unless the rollout is held.
func (m *machine) resend() {
	s := &m.s
	w := m.current()
	if w == nil || !w.Offered.IsZero() || s.Terminal() || s.Halted != nil || s.Paused != nil {
		return
	}
	devs := make([]string, 0, len(w.Devices))
	for d := range w.Devices {
		devs = append(devs, d)
	}
	slices.Sort(devs)
	m.acts = append(m.acts, Offer{Wave: s.Wave, Devices: devs})
}

func (m *machine) offered(wave int) {
	w := m.current()
	if wave != m.s.Wave || w == nil || !w.Offered.IsZero() {
		return
	}
	w.Offered = m.now
	m.note("wave %d offered to %d devices", wave, len(w.Devices))
}

func (m *machine) command(c Command) {
	s := &m.s
	if (c.ID != "" && c.ID == s.LastCommand) || s.Terminal() {
		return
	}
	why := string(c.Op)
	if c.By != "" {
		why += " by " + c.By
	}
	if c.Reason != "" {
		why += ": " + c.Reason
	}
	switch c.Op {
	case OpPause:
		if s.Paused == nil {
			s.Paused = &Mark{Time: m.now, Reason: why}
			m.note("%s", why)
		}
	case OpResume:
		if s.Paused != nil || s.Halted != nil {
			s.Paused, s.Halted = nil, nil
			s.AcceptedBad = s.Counts.Bad()
			m.note("%s (accepting %d failed devices)", why, s.AcceptedBad)
		}
	case OpAbort:
		s.Aborted = &Mark{Time: m.now, Reason: why}
		m.note("%s", why)
		m.acts = append(m.acts, Abort{Reason: why})
	default:
		return
	}
	if c.ID != "" {
		s.LastCommand = c.ID
		m.changed = true
	}
}
