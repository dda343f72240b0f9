package rollout

import (
	"fmt"
	"slices"
	"time"
)

// Input is one thing Step reacts to.
type Input interface{ isInput() }

// Observe is the fleet as seen now. Every judgement (outcomes, timeouts,
// halts, wave ends and starts, offers) happens on an Observe with a ready
// view.
type Observe struct{ View View }

// Offered tells Step that the offers of wave Wave (from 1) up to place
// Through (an Offer's) are published.
type Offered struct {
	Wave    int
	Through Place
}

// CaughtUp tells Step that the first N devices of the catch-up queue (an
// Offer with CatchUp) are offered again.
type CaughtUp struct{ N int }

func (Observe) isInput()  {}
func (Command) isInput()  {}
func (Offered) isInput()  {}
func (CaughtUp) isInput() {}

// Action is an instruction to the driver, carried out in order.
type Action interface{ isAction() }

// PublishState publishes the state retained. It comes before any Offer of
// the same step: a batch's place is on record before any of it is offered.
type PublishState struct{ State State }

// Offer publishes the plan's offer retained on each device's desired topic;
// the driver answers with Offered (or CaughtUp) once all are out. Offers
// are the same bytes every time, so publishing one again after a crash is
// harmless: a device never installs the same offer twice.
type Offer struct {
	Wave    int
	Devices []string
	Through Place // the wave's cursor once these are out
	CatchUp bool  // devices offered again, from the catch-up queue
}

// PublishRecord publishes a per-device record retained, before the state
// of the same step.
type PublishRecord struct{ Record Record }

// Halt says the halt rule stopped the rollout.
type Halt struct{ Reason string }

// Finish says the last wave ended.
type Finish struct{}

// Abort says an operator aborted the rollout.
type Abort struct{ Reason string }

func (PublishState) isAction()  {}
func (PublishRecord) isAction() {}
func (Offer) isAction()         {}
func (Halt) isAction()          {}
func (Finish) isAction()        {}
func (Abort) isAction()         {}

// maxBatch bounds the offers of one Offer action, so a controller renews
// its lease and records its cursor between batches of a big wave.
const maxBatch = 25000

// Step is the rollout controller's whole logic: the state, the plan, one
// input and the time in; the new state and what to do out. It has no side
// effects, so every rule is a table test and a restarted controller given
// the retained state continues exactly where the last one was.
//
// now should carry the monotonic clock (time.Now): the lease is judged on
// it. The returned state is the one to go on from once its PublishState
// (if any) is carried out; if that fails, go on from s.
func Step(s State, p *Plan, in Input, now time.Time) (State, []Action) {
	m := &machine{s: s.clone(), p: p, now: now.UTC(), clock: now}
	if m.leaseLost(in) {
		return s, m.acts
	}
	switch in := in.(type) {
	case Observe:
		m.observe(in.View)
	case Command:
		m.command(in)
	case Offered:
		m.offered(in)
	case CaughtUp:
		m.caughtUp(in.N)
	case Claim:
		m.claim(in)
	case Release:
		m.release()
		return m.done(s)
	}
	if _, refused := in.(Claim); !refused || len(m.acts) == 0 {
		m.renew()
	}
	return m.done(s)
}

type machine struct {
	s       State
	p       *Plan
	now     time.Time // UTC, for what the state records
	clock   time.Time // as given, monotonic: the lease's clock
	changed bool
	wait    string // why the next wave cannot start, when that is news
	acts    []Action
	recs    []Action          // PublishRecord actions, carried out first
	newRecs map[string]Record // written this step
	// tallied: the step has counted once (catch-ups are taken then);
	// acceptedBad is the failures accepted among the counts.
	tallied     bool
	acceptedBad int
}

func (m *machine) note(format string, args ...any) {
	m.s.History = append(m.s.History, Change{Time: m.now, Event: fmt.Sprintf(format, args...)})
	if n := len(m.s.History); n > maxHistory {
		m.s.History = slices.Delete(m.s.History, 0, n-maxHistory)
	}
	m.changed = true
}

// done settles the headline; when anything published changed it counts
// the publish and puts the records, then the state, before the other
// actions.
func (m *machine) done(old State) (State, []Action) {
	if len(m.acts) == 1 {
		if _, ok := m.acts[0].(Refused); ok {
			return old, m.acts
		}
	}
	m.s.Phase, m.s.Reason = m.headline(old)
	if m.s.Phase != old.Phase || m.s.Reason != old.Reason || m.s.Counts != old.Counts || len(m.recs) > 0 {
		m.changed = true
	}
	if !m.changed {
		m.s.Updated = old.Updated
		return m.s, m.acts
	}
	m.s.Updated = m.now
	m.s.Seq++
	acts := append(slices.Clone(m.recs), PublishState{State: m.s})
	return m.s, append(acts, m.acts...)
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

// held reports whether nothing may be offered now.
func (m *machine) held() bool {
	s := &m.s
	return s.Terminal() || s.Halted != nil || s.Paused != nil
}

func (m *machine) observe(v View) {
	if m.s.Terminal() || !v.Ready {
		return // nothing is judged before the fleet has been seen
	}
	m.accept(v)
	m.tally(v)
	m.judge(false)
	for {
		m.endWave()
		m.finishIfDone()
		if !m.startNext(v) {
			break
		}
		m.tally(v)
	}
	m.offer(v)
	m.s.run.seen = m.now
}

// judge applies the halt rule: failed, rolled back, rejected and timed out
// devices over devices with an outcome, across the rollout, above
// max_failed_percent, leaving out the failures an operator's resume
// accepted. It judges once min_outcomes outcomes are in, and at every wave
// end whatever the number (so a canary wave smaller than min_outcomes is
// judged).
func (m *machine) judge(waveEnd bool) {
	if m.s.Halted != nil {
		return
	}
	t := m.totals()
	out, badN := t.Outcomes()-t.accepted, t.Bad()-t.accepted
	if out <= 0 || badN <= 0 || (out < m.p.Halt.MinOutcomes && !waveEnd) {
		return
	}
	if float64(badN)*100 <= m.p.Halt.MaxFailedPercent*float64(out) {
		return
	}
	reason := fmt.Sprintf("%d of %d devices with an outcome failed (%.1f%%), above max_failed_percent %v",
		badN, out, float64(badN)*100/float64(out), m.p.Halt.MaxFailedPercent)
	if t.accepted > 0 {
		reason += fmt.Sprintf(" (leaving out %d failures a resume accepted)", t.accepted)
	}
	if out < m.p.Halt.MinOutcomes {
		reason += fmt.Sprintf("; judged at the end of wave %d with fewer than min_outcomes %d", m.s.Wave, m.p.Halt.MinOutcomes)
	}
	m.s.Halted = &Mark{Time: m.now, Reason: reason}
	m.note("halted in wave %d: %s", m.s.Wave, reason)
	m.acts = append(m.acts, Halt{Reason: reason})
}

// endWave ends the current wave once all of it is offered and each of its
// devices has an outcome or timed out. Nothing else ends a wave (a pause
// does not).
func (m *machine) endWave() {
	w := m.current()
	if w == nil || w.Offered.IsZero() || !w.Ended.IsZero() || w.Counts.Pending > 0 || w.Queued > 0 || m.catchingUp(m.s.Wave) {
		return
	}
	w.Ended = m.now
	c := w.Counts
	m.note("wave %d ended: %d devices, %d success, %d up_to_date, %d failed, %d rolled_back, %d rejected, %d superseded, %d timed_out",
		m.s.Wave, c.Devices, c.Success, c.UpToDate, c.Failed, c.RolledBack, c.Rejected, c.Superseded, c.TimedOut)
	m.judge(true)
}

func (m *machine) catchingUp(wave int) bool {
	for _, c := range m.s.run.catchUp {
		if c.wave == wave {
			return true
		}
	}
	return false
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
	if m.held() || s.Wave >= len(m.p.Waves) {
		return false
	}
	if w := m.current(); w != nil && (w.Ended.IsZero() || m.now.Before(w.Ended.Add(m.p.Waves[s.Wave-1].Soak))) {
		return false
	}
	i := s.Wave
	if m.p.Waves[i].Devices == nil && !anyInGroup(v) {
		// A percent of nobody would end the wave at once and finish the
		// rollout having offered nothing: wait for the group to be seen.
		m.wait = fmt.Sprintf("wave %d waits: no device's status lists group %q", i+1, m.p.Group)
		return false
	}
	w := startWave(m.p, s.Waves, i, v.Devices)
	w.Started = m.now
	if m.p.Rate != nil {
		w.Pace = newPace(m.p.Rate, m.now)
	}
	s.Waves = append(s.Waves, w)
	s.Wave = i + 1
	m.note("wave %d started: %d devices", s.Wave, w.Chosen)
	return true
}

func anyInGroup(v View) bool {
	found := false
	v.each(func(_ string, d Device) { found = found || d.InGroup })
	return found
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
		if h := s.Halted; h != nil && !c.Time.IsZero() && c.Time.Before(h.Time) {
			// Issued before the halt it would lift: an older command
			// published again, not an answer to this halt.
			m.note("%s refused: issued %s, before the halt of %s (a command replayed)", why,
				c.Time.UTC().Format(time.RFC3339), h.Time.UTC().Format(time.RFC3339))
			break
		}
		if s.Paused != nil || s.Halted != nil {
			if s.Halted != nil {
				// The failures so far are accepted on the next complete
				// view, device by device (accept).
				s.Accepting = &Mark{Time: m.now, Reason: why}
			}
			s.Paused, s.Halted = nil, nil
			m.note("%s", why)
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
