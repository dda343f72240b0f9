package rollout

import (
	"strings"
	"testing"
	"time"
)

const (
	m  = time.Minute
	hr = time.Hour
)

func TestStep(t *testing.T) {
	// Two named waves: d1,d2 (soak 30m), then d3. Halt above 10%, judged from 1 outcome.
	two := testPlan(10, 1, named(30*m, "d1", "d2"), named(0, "d3"))
	// One wave of five, judged from 3 outcomes, halting above 20%.
	five := testPlan(20, 3, named(0, "d1", "d2", "d3", "d4", "d5"))
	// A 2-device canary smaller than min_outcomes 10, then d3.
	canary := testPlan(5, 10, named(0, "d1", "d2"), named(0, "d3"))
	all := []string{"d1", "d2", "d3"}
	started := []step{obs(0, all...), sent(m, 1)}
	// halted: canary with one rollback, judged at the wave end.
	halted := append(append([]step{}, started...), obs(5*m, "d1=success", "d2=rolled_back", "d3"))
	then := func(base []step, more ...step) []step { return append(append([]step{}, base...), more...) }

	tests := []struct {
		name   string
		plan   *Plan
		steps  []step
		phase  string
		wave   int
		acts   string // of the last step
		counts *Counts
		check  func(t *testing.T, s State)
	}{
		// A wave must not start when no condition was evaluated.
		{name: "no observation yet: nothing starts and nothing is published",
			plan: two, steps: []step{{0, Observe{}}}, phase: PhaseWaiting, wave: 0, acts: "none"},
		{name: "a view that is not ready yet is not judged",
			plan: two, steps: []step{{0, Observe{View: View{Devices: view(all...).Devices}}}}, phase: PhaseWaiting, acts: "none"},
		{name: "a restarted controller judges no timeout before its view is ready",
			plan: two, steps: then(started, step{10 * hr, Observe{}}), phase: PhaseRunning, wave: 1, acts: "none",
			counts: &Counts{Devices: 2, Pending: 2}},
		{name: "the first ready view starts wave 1, state published before the offers",
			plan: two, steps: []step{obs(0, all...)}, phase: PhaseRunning, wave: 1, acts: "state offer(1:d1,d2)",
			counts: &Counts{}, check: func(t *testing.T, s State) {
				if w := s.Waves[0]; w.Queued != 2 || w.Next == nil || w.Cursor != nil {
					t.Errorf("wave 1 %+v: want 2 queued, a batch asked for, none out", w)
				}
			}},
		{name: "a percent wave does not start while no device lists the group",
			plan:  testPlan(10, 1, Wave{Percent: 100}),
			steps: []step{obs(0, "x=out")},
			phase: PhaseWaiting, wave: 0, acts: "state",
			check: func(t *testing.T, s State) {
				if !strings.Contains(s.Reason, `no device's status lists group "g"`) {
					t.Errorf("reason %q", s.Reason)
				}
			}},

		// Offers go out once, and again only when not confirmed.
		{name: "offers are asked for again until the driver confirms them",
			plan: two, steps: []step{obs(0, all...), obs(m, all...)}, phase: PhaseRunning, wave: 1, acts: "offer(1:d1,d2)"},
		{name: "confirmed offers are not sent again",
			plan: two, steps: then(started, obs(2*m, all...)), phase: PhaseRunning, wave: 1, acts: "none"},
		{name: "a result seen before the offers are confirmed waits until they are",
			plan: two, steps: []step{obs(0, "d1=success", "d2", "d3")}, wave: 1, phase: PhaseRunning,
			counts: &Counts{}},

		// A device's outcome counts only if it is for this rollout's offer.
		{name: "a result for an older release or another image is not an outcome",
			plan: testPlan(10, 1, named(0, "d1", "d2", "d3")), steps: []step{obs(0, all...), sent(m, 1), obs(2*m, "d1=old-failed", "d2=sha-failed", "d3=success")},
			phase: PhaseRunning, counts: &Counts{Devices: 3, Pending: 2, Success: 1}},
		{name: "a refusal because the device moved on is superseded, another refusal is rejected",
			plan: testPlan(100, 1, named(0, "d1", "d2")), steps: then(started, obs(2*m, "d1=refused-stale", "d2=refused-bad_signature")),
			phase: PhaseFinished, counts: &Counts{Devices: 2, Superseded: 1, Rejected: 1}},
		{name: "a refusal reported in last_result (agents before last_refusal) counts the same",
			plan: testPlan(100, 1, named(0, "d1", "d2")), steps: then(started, obs(2*m, "d1=result-refused-downgrade", "d2=result-refused-bad_signature")),
			phase: PhaseFinished, counts: &Counts{Devices: 2, Superseded: 1, Rejected: 1}},
		{name: "a refusal of an earlier offer is not an outcome",
			plan: testPlan(100, 1, named(0, "d1", "d2")), steps: then(started, obs(2*m, "d1=old-refused-bad_signature", "d2=success")),
			phase: PhaseRunning, counts: &Counts{Devices: 2, Pending: 1, Success: 1}},

		// Percentages count devices, not attempts.
		{name: "a device re-reporting its failure is one failed device",
			plan: testPlan(30, 4, named(0, "d1", "d2", "d3", "d4")),
			steps: []step{obs(0), sent(m, 1), obs(2*m, "d1=failed", "d2=success", "d3=success", "d4"),
				obs(3*m, "d1=failed", "d2=success", "d3=success", "d4"), obs(4*m, "d1=failed", "d2=success", "d3=success", "d4"),
				obs(5*m, "d1=failed", "d2=success", "d3=success", "d4=success")},
			phase: PhaseFinished, acts: "state finish", counts: &Counts{Devices: 4, Success: 3, Failed: 1}},

		// A device that never reports times out and counts as failed.
		{name: "a silent device is pending until device_timeout",
			plan: testPlan(50, 1, named(0, "d1", "d2"), named(0, "d3")), steps: then(started, obs(60*m, "d1=success", "d2")),
			phase: PhaseRunning, wave: 1, counts: &Counts{Devices: 2, Pending: 1, Success: 1}},
		{name: "a silent device times out after device_timeout and its wave ends",
			plan: testPlan(50, 1, named(0, "d1", "d2"), named(0, "d3")), steps: then(started, obs(61*m, "d1=success", "d2")),
			phase: PhaseRunning, wave: 2, acts: "state offer(2:d3)", counts: &Counts{Devices: 2, Success: 1, TimedOut: 1}},
		{name: "a timed out device counts as failed for the halt rule",
			plan: two, steps: then(started, obs(61*m, "d1=success", "d2")), phase: PhaseHalted, wave: 1, acts: "state halt",
			counts: &Counts{Devices: 2, Success: 1, TimedOut: 1}},
		{name: "a device reporting after its timeout replaces the timeout",
			plan: testPlan(50, 1, named(hr, "d1", "d2"), named(0, "d3")), steps: then(started, obs(61*m, "d1=success", "d2"), obs(70*m, "d1=success", "d2=success")),
			phase: PhaseSoaking, wave: 1, counts: &Counts{Devices: 2, Success: 2}},

		// The wave ends when each device has an outcome or timed out.
		{name: "a wave with a device still installing does not end",
			plan: two, steps: then(started, obs(5*m, "d1=success", "d2")), phase: PhaseRunning, wave: 1, acts: "state",
			check: func(t *testing.T, s State) {
				if !s.Waves[0].Ended.IsZero() {
					t.Error("wave 1 ended with d2 pending")
				}
			}},

		// Soak waits after a wave ends.
		{name: "the next wave waits for the soak",
			plan: two, steps: then(started, obs(10*m, "d1=success", "d2=success", "d3"), obs(39*m, "d1=success", "d2=success", "d3")),
			phase: PhaseSoaking, wave: 1, acts: "none",
			check: func(t *testing.T, s State) {
				if !strings.Contains(s.Reason, "wave 2 starts after its soak, at 2026-11-29T10:40:00Z") {
					t.Errorf("reason %q", s.Reason)
				}
			}},
		{name: "the next wave starts when the soak is over",
			plan: two, steps: then(started, obs(10*m, "d1=success", "d2=success", "d3"), obs(40*m, "d1=success", "d2=success", "d3")),
			phase: PhaseRunning, wave: 2, acts: "state offer(2:d3)"},

		// Finish when the last wave ends.
		{name: "the rollout finishes when the last wave ends",
			plan: two, steps: then(started, obs(10*m, "d1=success", "d2=up_to_date", "d3"), obs(40*m, "d1=success", "d2=up_to_date", "d3"),
				sent(41*m, 2), obs(50*m, "d1=success", "d2=up_to_date", "d3=success")),
			phase: PhaseFinished, wave: 2, acts: "state finish", counts: &Counts{Devices: 3, Success: 2, UpToDate: 1}},
		{name: "a finished rollout does nothing more",
			plan: two, steps: then(started, obs(10*m, "d1=success", "d2=success", "d3"), obs(40*m, "d1=success", "d2=success", "d3"),
				sent(41*m, 2), obs(50*m, "d1=success", "d2=success", "d3=success"), obs(51*m, "d1=failed", "d2=success", "d3=failed"), cmd(52*m, OpPause, "c1")),
			phase: PhaseFinished, acts: "none", counts: &Counts{Devices: 3, Success: 3}},

		// Halt: failed + rolled_back over devices with an outcome, once min_outcomes are in.
		{name: "no halt before min_outcomes outcomes are in",
			plan: five, steps: []step{obs(0), sent(m, 1), obs(2*m, "d1=failed", "d2=success")},
			phase: PhaseRunning, counts: &Counts{Devices: 5, Pending: 3, Success: 1, Failed: 1}},
		{name: "halt once min_outcomes are in and failures pass max_failed_percent",
			plan: five, steps: []step{obs(0), sent(m, 1), obs(2*m, "d1=failed", "d2=success", "d3=success")},
			phase: PhaseHalted, acts: "state halt",
			check: func(t *testing.T, s State) {
				if !strings.Contains(s.Reason, "1 of 3 devices with an outcome failed (33.3%), above max_failed_percent 20") {
					t.Errorf("reason %q", s.Reason)
				}
			}},
		{name: "failures at exactly max_failed_percent do not halt",
			plan:  testPlan(20, 5, named(0, "d1", "d2", "d3", "d4", "d5")),
			steps: []step{obs(0), sent(m, 1), obs(2*m, "d1=rolled_back", "d2=success", "d3=success", "d4=success", "d5=success")},
			phase: PhaseFinished, acts: "state finish"},
		{name: "a canary smaller than min_outcomes is judged at its end",
			plan: canary, steps: then(started, obs(2*m, "d1=success", "d2"), obs(5*m, "d1=success", "d2=rolled_back", "d3")),
			phase: PhaseHalted, wave: 1, acts: "state halt",
			check: func(t *testing.T, s State) {
				if !strings.Contains(s.Reason, "judged at the end of wave 1 with fewer than min_outcomes 10") {
					t.Errorf("reason %q", s.Reason)
				}
			}},
		{name: "a clean canary smaller than min_outcomes goes on",
			plan: canary, steps: then(started, obs(5*m, "d1=success", "d2=success", "d3")), phase: PhaseRunning, wave: 2, acts: "state offer(2:d3)"},

		// A halted rollout resumes only by an operator resume.
		{name: "a halted rollout stays halted however long it waits",
			plan: canary, steps: then(halted, obs(10*hr, "d1=success", "d2=rolled_back", "d3")), phase: PhaseHalted, wave: 1, acts: "none"},
		{name: "a resume continues a halted rollout, accepting the failures so far",
			plan: canary, steps: then(halted, cmd(hr, OpResume, "c1"), obs(hr+m, "d1=success", "d2=rolled_back", "d3")),
			phase: PhaseRunning, wave: 2, acts: "record(d2) state offer(2:d3)",
			check: func(t *testing.T, s State) {
				if s.Accepted != 1 || s.Records != 1 || s.Halted != nil || s.Accepting != nil || s.LastCommand != "c1" {
					t.Errorf("accepted %d (records %d) halted %v accepting %v last command %q", s.Accepted, s.Records, s.Halted, s.Accepting, s.LastCommand)
				}
			}},
		{name: "a resume of a rollout halted at its last wave's end finishes it",
			plan: testPlan(10, 1, named(0, "d1", "d2")), steps: []step{obs(0), sent(m, 1), obs(2*m, "d1=success", "d2=failed"), cmd(hr, OpResume, "c1"), obs(hr+m, "d1=success", "d2=failed")},
			phase: PhaseFinished, wave: 1, acts: "record(d2) state finish"},
		{name: "after a resume a new failure halts again",
			plan: canary, steps: then(halted, cmd(hr, OpResume, "c1"), obs(hr+m, "d1=success", "d2=rolled_back", "d3"), sent(hr+2*m, 2),
				obs(hr+3*m, "d1=success", "d2=rolled_back", "d3=failed")),
			phase: PhaseHalted, wave: 2, acts: "state halt"},
		{name: "a retained command delivered again is applied once",
			plan: canary, steps: then(halted, cmd(hr, OpResume, "c1"), obs(hr+m, "d1=success", "d2=rolled_back", "d3"), sent(hr+2*m, 2),
				obs(hr+3*m, "d1=success", "d2=rolled_back", "d3=failed"), cmd(hr+4*m, OpResume, "c1")),
			phase: PhaseHalted, wave: 2, acts: "none"},

		{name: "a resume issued before the halt (an older command replayed) does not lift it",
			plan: canary, steps: then(halted, step{hr, Command{ID: "old", Op: OpResume, By: "op", Time: t0}}, obs(hr+m, "d1=success", "d2=rolled_back", "d3")),
			phase: PhaseHalted, wave: 1, acts: "none",
			check: func(t *testing.T, s State) {
				if s.Accepting != nil || s.LastCommand != "old" || !strings.Contains(s.History[len(s.History)-1].Event, "before the halt") {
					t.Errorf("accepting %v, last command %q, history %+v", s.Accepting, s.LastCommand, s.History[len(s.History)-1])
				}
			}},

		// A pause offers nothing new and does not end a wave.
		{name: "a pause does not end the running wave",
			plan: two, steps: then(started, cmd(2*m, OpPause, "p1"), obs(3*m, "d1=success", "d2", "d3")),
			phase: PhasePaused, wave: 1, acts: "state",
			check: func(t *testing.T, s State) {
				if !s.Waves[0].Ended.IsZero() || s.Reason != "pause by op" {
					t.Errorf("wave 1 ended %v, reason %q", s.Waves[0].Ended, s.Reason)
				}
			}},
		{name: "a paused rollout starts no new wave after the soak",
			plan: two, steps: then(started, cmd(2*m, OpPause, "p1"), obs(3*m, "d1=success", "d2=success", "d3"), obs(2*hr, "d1=success", "d2=success", "d3")),
			phase: PhasePaused, wave: 1, acts: "none"},
		{name: "a pause before the offers went out holds them back",
			plan: two, steps: []step{obs(0, all...), cmd(m, OpPause, "p1"), obs(2*m, all...)}, phase: PhasePaused, wave: 1, acts: "none"},
		{name: "a resume after a pause sends the held offers",
			plan: two, steps: []step{obs(0, all...), cmd(m, OpPause, "p1"), obs(2*m, all...), cmd(3*m, OpResume, "r1"), obs(4*m, all...)},
			phase: PhaseRunning, wave: 1, acts: "offer(1:d1,d2)"},
		{name: "a resume after a pause goes on to the next wave",
			plan: two, steps: then(started, cmd(2*m, OpPause, "p1"), obs(3*m, "d1=success", "d2=success", "d3"), cmd(2*hr, OpResume, "r1"),
				obs(2*hr+m, "d1=success", "d2=success", "d3")),
			phase: PhaseRunning, wave: 2, acts: "state offer(2:d3)"},

		// Abort stops offering, for good.
		{name: "abort stops the rollout",
			plan: two, steps: then(started, cmd(2*m, OpAbort, "a1")), phase: PhaseAborted, wave: 1, acts: "state abort"},
		{name: "an aborted rollout offers nothing and cannot be resumed",
			plan: two, steps: then(started, cmd(2*m, OpAbort, "a1"), obs(3*m, "d1=success", "d2=success", "d3"), cmd(4*m, OpResume, "r1"),
				obs(2*hr, "d1=success", "d2=success", "d3")),
			phase: PhaseAborted, wave: 1, acts: "none"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, got := run(t, tc.plan, tc.steps...)
			if s.Phase != tc.phase {
				t.Errorf("phase %q (%s), want %q", s.Phase, s.Reason, tc.phase)
			}
			if s.Wave != tc.wave && tc.wave != 0 {
				t.Errorf("wave %d, want %d", s.Wave, tc.wave)
			}
			if tc.acts != "" && got != tc.acts {
				t.Errorf("actions %q, want %q", got, tc.acts)
			}
			if tc.counts != nil && s.Counts != *tc.counts {
				t.Errorf("counts %+v\nwant   %+v", s.Counts, *tc.counts)
			}
			if tc.check != nil {
				tc.check(t, s)
			}
			if t.Failed() {
				for _, c := range s.History {
					t.Logf("history: %s %s", c.Time.Format("15:04"), c.Event)
				}
			}
		})
	}
}
