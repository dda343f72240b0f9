package rollout

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// One rollout per group: another of the group that a controller runs now
// refuses the start; one halted, or that no controller runs, warns; ended
// ones, other groups and the plan's own state are passed over.
func TestSharedGroup(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	live := &Lease{Holder: "alice@ops-1 pid 42", Epoch: 1, Renewed: now.Add(-5 * time.Second), TTLMS: 30000}
	expired := &Lease{Holder: "bob@ops-2 pid 7", Epoch: 2, Renewed: now.Add(-time.Hour), TTLMS: 30000}
	released := &Lease{Holder: "carol@ops-3 pid 9", Epoch: 1, Renewed: now.Add(-time.Second), TTLMS: 30000, Released: now.Add(-time.Second)}
	mark := &Mark{Time: now.Add(-time.Minute)}
	other := func(name, group, phase string, l *Lease) State {
		return State{Name: name, Group: group, Phase: phase, Wave: 2, WaveCount: 3, Offer: Ref{ID: "rel-1"}, Lease: l}
	}
	p := &Plan{Name: "fw-2", Group: "eu"}
	for _, tc := range []struct {
		name   string
		states []State
		refuse []string // in the error, when refused
		warn   []string // in the one warning, when one
	}{
		{"running with a live lease", []State{other("fw-1", "eu", PhaseRunning, live)},
			[]string{"group eu is in rollout fw-1 (running, wave 2 of 3, offer rel-1), which alice@ops-1 pid 42 runs now", "otactl rollout abort"}, nil},
		{"paused by an operator, its controller on", []State{other("fw-1", "eu", PhasePaused, live)}, []string{"fw-1 (paused"}, nil},
		{"halted, its controller still recording", []State{func() State { s := other("fw-1", "eu", PhaseHalted, live); s.Halted = mark; return s }()},
			nil, []string{"group eu is also in rollout fw-1 (halted", "a resume offers it again", "otactl rollout abort --withdraw fw-1"}},
		{"its controller gone (lease expired)", []State{other("fw-1", "eu", PhaseRunning, expired)}, nil, []string{"which no controller runs now"}},
		{"its controller stopped (lease released)", []State{other("fw-1", "eu", PhaseSoaking, released)}, nil, []string{"which no controller runs now"}},
		{"never started by a controller that still runs (no lease)", []State{other("fw-1", "eu", PhaseWaiting, nil)}, nil, []string{"which no controller runs now"}},
		{"finished", []State{func() State { s := other("fw-1", "eu", PhaseFinished, live); s.Finished = mark; return s }()}, nil, nil},
		{"aborted", []State{func() State { s := other("fw-1", "eu", PhaseAborted, live); s.Aborted = mark; return s }()}, nil, nil},
		{"another group", []State{other("fw-1", "us", PhaseRunning, live)}, nil, nil},
		{"its own state", []State{other("fw-2", "eu", PhaseRunning, live)}, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			warnings, err := SharedGroup(p, tc.states, now)
			if (err != nil) != (tc.refuse != nil) || (err != nil && !errors.Is(err, ErrGroupBusy)) {
				t.Fatalf("err = %v, want refused: %v", err, tc.refuse != nil)
			}
			for _, want := range tc.refuse {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("refusal does not say %q:\n%v", want, err)
				}
			}
			if (len(warnings) == 1) != (tc.warn != nil) || len(warnings) > 1 {
				t.Fatalf("warnings %q, want one: %v", warnings, tc.warn != nil)
			}
			for _, want := range tc.warn {
				if !strings.Contains(warnings[0], want) {
					t.Errorf("warning does not say %q:\n%s", want, warnings[0])
				}
			}
		})
	}
}
