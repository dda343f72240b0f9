package rollout

import (
	"encoding/json"
	"fmt"
	"slices"
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

// Ref names an offer: the SHA-256 of its signed manifest bytes, which
// identifies it (docs/contract/rollouts.md, rule 3), with the manifest's id
// (a display name: two signatures of one image may share it) and its
// payload's sha256. A Ref without ManifestSHA256 (a state written before it
// was kept, a follower that knows only the id) names every offer with that
// id and image.
type Ref struct {
	ID             string `json:"id"`
	SHA256         string `json:"sha256,omitempty"`
	ManifestSHA256 string `json:"manifest_sha256,omitempty"`
}

// State is a rollout's state as retained on ota/rollouts/{name}/state. Its
// size does not depend on the number of devices (docs/contract/rollouts.md,
// the state topic): a percent wave's members are the group's devices whose
// place in the stable order is within the wave's range; the offers out are
// a cursor on that order; each device's outcome is read from its own status,
// and the few facts a status cannot show live in per-device records
// (Record). Counts are rebuilt from those on every step.
type State struct {
	Name     string `json:"name"`
	PlanHash string `json:"plan_hash"`
	Group    string `json:"group"`
	Offer    Ref    `json:"offer"` // id and sha256 of the released manifest
	Phase    string `json:"state"`
	Reason   string `json:"reason,omitempty"` // why the phase: a halt's numbers, an operator's words
	Wave     int    `json:"wave"`             // the current wave, from 1; 0 before the first
	// WaveCount is the plan's number of waves.
	WaveCount int `json:"wave_count"`
	// Seq counts the publishes of this state: of two copies (brokers that
	// keep retained messages per node), the higher (Lease.Epoch, Seq) is newer.
	Seq    uint64      `json:"seq"`
	Lease  *Lease      `json:"lease,omitempty"`
	Counts Counts      `json:"counts"`
	Waves  []WaveState `json:"waves"`
	// Records is how many per-device records were written, so a reader
	// knows when it has them all.
	Records  int   `json:"records,omitempty"`
	Paused   *Mark `json:"paused,omitempty"`
	Halted   *Mark `json:"halted,omitempty"`
	Aborted  *Mark `json:"aborted,omitempty"`
	Finished *Mark `json:"finished,omitempty"`
	// Accepting is set by a resume until the failed devices it accepts
	// are recorded (on the next complete view of the fleet).
	Accepting *Mark `json:"accepting,omitempty"`
	// Accepted is how many failed devices resumes accepted (each has an
	// accepted record): the halt rule judges the others.
	Accepted int `json:"accepted,omitempty"`
	// LastCommand is the ID of the last operator command applied, so a
	// retained command delivered again is not applied twice.
	LastCommand string    `json:"last_command,omitempty"`
	Created     time.Time `json:"created"`
	Updated     time.Time `json:"updated"`
	History     []Change  `json:"history"`

	run process // this controller's memory, never published
}

// process is what one controller process keeps beside the published state.
type process struct {
	// seen is when the last ready view was judged: a device first heard
	// of after it, behind its wave's cursor, is offered then (catch-up).
	seen time.Time
	// catchUp are devices to offer again, in order, paced with the rest.
	catchUp []catchUp
	// renewed is when this controller last renewed its lease, on its own
	// (monotonic) clock.
	renewed time.Time
}

type catchUp struct {
	wave   int // from 1
	device string
}

// WaveState is a started wave.
type WaveState struct {
	Kind    string    `json:"kind"`             // WaveDevices or WavePercent
	Started time.Time `json:"started"`          // its range chosen
	Offered time.Time `json:"offered,omitzero"` // every member's offer published; timeouts count from here
	Ended   time.Time `json:"ended,omitzero"`   // every member has an outcome
	// Through is a percent wave's range: the places after the previous
	// percent wave's Through (from the start for the first), up to this
	// one. Its members are the group's devices in that range that no wave
	// names.
	Through *Place `json:"through,omitempty"`
	// Chosen is how many members the wave had when it started.
	Chosen int `json:"chosen"`
	// Cursor: every member up to this place has been offered; nil before
	// the first offer. Next is the batch being offered (up to it).
	Cursor *Place `json:"cursor,omitempty"`
	Next   *Place `json:"next,omitempty"`
	// Queued is how many members seen are not offered yet.
	Queued int    `json:"queued,omitempty"`
	Pace   *Pace  `json:"pace,omitempty"`
	Counts Counts `json:"counts"` // of this wave's devices offered
}

// Wave kinds.
const (
	WaveDevices = "devices"
	WavePercent = "percent"
)

// Counts counts devices (never attempts or reports) by outcome.
type Counts struct {
	Devices    int `json:"devices"` // offered
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

func (c *Counts) plus(o Counts) {
	c.Devices += o.Devices
	c.Pending += o.Pending
	c.Success += o.Success
	c.UpToDate += o.UpToDate
	c.Failed += o.Failed
	c.RolledBack += o.RolledBack
	c.Rejected += o.Rejected
	c.Superseded += o.Superseded
	c.TimedOut += o.TimedOut
}

// IsFailure reports whether the halt rule counts outcome as a failure.
func IsFailure(outcome ota.Result) bool { return bad(outcome) }

func bad(outcome ota.Result) bool {
	switch outcome {
	case ota.ResultFailed, ota.ResultRolledBack, ota.ResultRejected, TimedOut:
		return true
	}
	return false
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

// maxHistory bounds the history kept in the retained state; Encode keeps
// fewer when the state would be over MaxStateSize.
const maxHistory = 100

// Sizes of what the fleet side publishes and reads (docs/contract/rollouts.md).
const (
	// MaxStateSize bounds the retained state a controller publishes,
	// whatever the number of devices.
	MaxStateSize = 16 << 10
	// MaxReadSize bounds every message the fleet side reads (a state, a
	// record, a command): AWS IoT Core's message limit.
	MaxReadSize = 128 << 10
)

// NewState is the state of a rollout that has not started.
func NewState(p *Plan, now time.Time) State {
	return State{
		Name: p.Name, PlanHash: p.Hash, Group: p.Group, Offer: p.Offer.Ref(),
		Phase: PhaseWaiting, WaveCount: len(p.Waves), Waves: []WaveState{}, Created: now.UTC(), Updated: now.UTC(),
		History: []Change{{Time: now.UTC(), Event: "created"}},
	}
}

// Encode is the state as published: at most MaxStateSize bytes, the
// oldest history left out when it would be more.
func (s State) Encode() ([]byte, error) {
	for {
		b, err := json.Marshal(s)
		if err != nil {
			return nil, fmt.Errorf("encode state: %w", err)
		}
		if len(b) <= MaxStateSize {
			return b, nil
		}
		if len(s.History) <= 1 {
			return nil, fmt.Errorf("state of rollout %s is %d bytes without its history, over the limit of %d", s.Name, len(b), MaxStateSize)
		}
		s.History = s.History[max(1, len(s.History)/8):]
	}
}

// DecodeState reads a rollout's state as retained on its state topic
// (outside input): within MaxReadSize, and every count, list and duration
// within its bound (a *BoundsError names the field).
func DecodeState(b []byte) (State, error) {
	if len(b) > MaxReadSize {
		return State{}, fmt.Errorf("%d bytes, over the limit of %d", len(b), MaxReadSize)
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return State{}, err
	}
	if err := s.bounds(); err != nil {
		return State{}, err
	}
	return s, nil
}

// Newer reports whether s is a later copy of the same rollout's state than o.
func (s State) Newer(o State) bool {
	se, oe := s.Lease.epoch(), o.Lease.epoch()
	if se != oe {
		return se > oe
	}
	return s.Seq > o.Seq
}

// Consistent is nil when s has the shape of a state p's controller
// records: its name and number of waves, and the waves started so far.
func (s State) Consistent(p *Plan) error {
	if s.Name != p.Name || s.WaveCount != len(p.Waves) || s.Wave != len(s.Waves) || s.Wave > len(p.Waves) {
		return fmt.Errorf("rollout %q in wave %d of %d with %d waves recorded: not a state of this plan's %d waves",
			s.Name, s.Wave, s.WaveCount, len(s.Waves), len(p.Waves))
	}
	for i, w := range s.Waves {
		want := WavePercent
		if p.Waves[i].Devices != nil {
			want = WaveDevices
		}
		if w.Kind != want || (want == WaveDevices && w.Through != nil) || (want == WavePercent && w.Through == nil && w.Chosen != 0) {
			return fmt.Errorf("rollout %q: wave %d is recorded as %q, the plan's is a %s wave", s.Name, i+1, w.Kind, want)
		}
	}
	return nil
}

// RenewedHere is when this process last claimed or renewed s's lease, on
// its own (monotonic) clock; zero for a state it never claimed (read from
// the broker). The controller checks it before every publish.
func (s State) RenewedHere() time.Time { return s.run.renewed }

// Terminal reports whether nothing more will happen: finished or aborted.
func (s State) Terminal() bool { return s.Finished != nil || s.Aborted != nil }

// clone copies s deeply enough that changing the copy leaves s alone.
func (s State) clone() State {
	c := s
	c.Waves = slices.Clone(s.Waves)
	for i := range c.Waves {
		w := &c.Waves[i]
		for _, p := range []**Place{&w.Through, &w.Cursor, &w.Next} {
			if *p != nil {
				v := **p
				*p = &v
			}
		}
		if w.Pace != nil {
			v := *w.Pace
			w.Pace = &v
		}
	}
	c.History = slices.Clone(s.History)
	for _, m := range []**Mark{&c.Paused, &c.Halted, &c.Aborted, &c.Finished, &c.Accepting} {
		if *m != nil {
			v := **m
			*m = &v
		}
	}
	if s.Lease != nil {
		v := *s.Lease
		c.Lease = &v
	}
	// catchUp is only ever consumed from the front or appended to past
	// its length, so the copies can share its array.
	return c
}
