package rollout

import (
	"encoding/json"
	"fmt"
	"maps"
	"time"

	"github.com/otad/otad/ota"
)

// TimedOut is the outcome the controller gives a device that reported none
// within device_timeout. Every other outcome is a device's result of docs/contract/installing.md
// (ota.Result), as its status' last_result carries it.
const TimedOut ota.Result = "timed_out"

// Phases of a rollout: the state's headline.
const (
	PhaseWaiting  = "waiting"  // no wave started yet
	PhaseRunning  = "running"  // a wave's devices are installing
	PhaseSoaking  = "soaking"  // a wave ended; the next waits for its soak
	PhasePaused   = "paused"   // by the operator
	PhaseHalted   = "halted"   // by the halt rule; only an operator resume continues
	PhaseAborted  = "aborted"  // by the operator; final
	PhaseFinished = "finished" // the last wave ended; final
)

// Ref names an image: a manifest's id and its payload's sha256.
type Ref struct {
	ID     string `json:"id"`
	SHA256 string `json:"sha256,omitempty"`
}

// View is the fleet as the controller sees it.
type View struct {
	// Ready is false until a first snapshot of the fleet is complete:
	// nothing is judged on a view that has not been filled yet.
	Ready   bool
	Devices map[string]ota.Status // by device ID
}

// State is a rollout's whole state, published retained on
// ota/rollouts/{name}/state. Devices' outcomes are kept once decided, so a
// restarted controller, or a device's later status about another image,
// does not change them.
type State struct {
	Name     string `json:"name"`
	PlanHash string `json:"plan_hash"`
	Group    string `json:"group"`
	Offer    Ref    `json:"offer"` // id and sha256 of the released manifest
	Phase    string `json:"state"`
	Reason   string `json:"reason,omitempty"` // why the phase: a halt's numbers, an operator's words
	Wave     int    `json:"wave"`             // the current wave, from 1; 0 before the first
	// WaveCount is the plan's number of waves.
	WaveCount int         `json:"wave_count"`
	Counts    Counts      `json:"counts"`
	Waves     []WaveState `json:"waves"`
	Paused    *Mark       `json:"paused,omitempty"`
	Halted    *Mark       `json:"halted,omitempty"`
	Aborted   *Mark       `json:"aborted,omitempty"`
	Finished  *Mark       `json:"finished,omitempty"`
	// AcceptedBad is the number of failed devices an operator's resume
	// accepted: the halt rule judges again only when more fail.
	AcceptedBad int `json:"accepted_bad,omitempty"`
	// LastCommand is the ID of the last operator command applied, so a
	// retained command delivered again is not applied twice.
	LastCommand string    `json:"last_command,omitempty"`
	Created     time.Time `json:"created"`
	Updated     time.Time `json:"updated"`
	History     []Change  `json:"history"`
}

// WaveState is a started wave.
type WaveState struct {
	Started time.Time             `json:"started"`          // members chosen
	Offered time.Time             `json:"offered,omitzero"` // every member's offer published; timeouts count from here
	Ended   time.Time             `json:"ended,omitzero"`   // every member has an outcome
	Counts  Counts                `json:"counts"`           // of this wave's devices
	Devices map[string]ota.Result `json:"devices"`          // device → outcome; "" while it has none
}

// Counts counts devices (never attempts or reports) by outcome.
type Counts struct {
	Devices    int `json:"devices"` // offered (or chosen and being offered)
	Pending    int `json:"pending"` // no outcome yet
	Success    int `json:"success"`
	UpToDate   int `json:"up_to_date"`
	Failed     int `json:"failed"`
	RolledBack int `json:"rolled_back"`
	Rejected   int `json:"rejected"`
	Superseded int `json:"superseded"`
	TimedOut   int `json:"timed_out"`
}

// Outcomes is the number of devices with an outcome.
func (c Counts) Outcomes() int { return c.Devices - c.Pending }

// Bad is the number of devices the halt rule counts as failed.
func (c Counts) Bad() int { return c.Failed + c.RolledBack + c.Rejected + c.TimedOut }

func (c *Counts) add(outcome ota.Result) {
	c.Devices++
	switch outcome {
	case "":
		c.Pending++
	case ota.ResultSuccess:
		c.Success++
	case ota.ResultUpToDate:
		c.UpToDate++
	case ota.ResultFailed:
		c.Failed++
	case ota.ResultRolledBack:
		c.RolledBack++
	case ota.ResultRejected:
		c.Rejected++
	case ota.ResultSuperseded:
		c.Superseded++
	case TimedOut:
		c.TimedOut++
	}
}

// Mark is when and why a rollout was paused, halted, aborted or finished.
type Mark struct {
	Time   time.Time `json:"time"`
	Reason string    `json:"reason,omitempty"`
}

// Change is one entry of the state's history.
type Change struct {
	Time  time.Time `json:"time"`
	Event string    `json:"event"`
}

// maxHistory bounds the history kept in the retained state.
const maxHistory = 100

// NewState is the state of a rollout that has not started.
func NewState(p *Plan, now time.Time) State {
	return State{
		Name: p.Name, PlanHash: p.Hash, Group: p.Group, Offer: Ref{ID: p.Offer.ID, SHA256: p.Offer.SHA256},
		Phase: PhaseWaiting, WaveCount: len(p.Waves), Waves: []WaveState{}, Created: now.UTC(), Updated: now.UTC(),
		History: []Change{{Time: now.UTC(), Event: "created"}},
	}
}

// DecodeState reads a rollout's state as retained on its state topic
// (outside input).
func DecodeState(b []byte) (State, error) {
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return State{}, err
	}
	return s, nil
}

// consistent is nil when s has the shape of a state p's controller
// records: its name and number of waves, and the waves started so far.
func (s State) consistent(p *Plan) error {
	if s.Name != p.Name || s.WaveCount != len(p.Waves) || s.Wave != len(s.Waves) || s.Wave > len(p.Waves) {
		return fmt.Errorf("rollout %q in wave %d of %d with %d waves recorded: not a state of this plan's %d waves",
			s.Name, s.Wave, s.WaveCount, len(s.Waves), len(p.Waves))
	}
	return nil
}

// Terminal reports whether nothing more will happen: finished or aborted.
func (s State) Terminal() bool { return s.Finished != nil || s.Aborted != nil }

// clone copies s deeply enough that changing the copy leaves s alone.
func (s State) clone() State {
	c := s
	c.Waves = make([]WaveState, len(s.Waves))
	for i, w := range s.Waves {
		w.Devices = maps.Clone(w.Devices)
		c.Waves[i] = w
	}
	c.History = append([]Change(nil), s.History...)
	for _, m := range []**Mark{&c.Paused, &c.Halted, &c.Aborted, &c.Finished} {
		if *m != nil {
			v := **m
			*m = &v
		}
	}
	return c
}
