package rollout

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/internal/testkit/rolloutsim"
	"github.com/otad/otad/ota"
)

var t0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

// The offer every test plan releases, and the image the fleet ran before.
var (
	testOffer = PlanOffer{ID: rolloutsim.New.ID, Version: "2.0", SHA256: rolloutsim.New.SHA256}
	testRef   = Ref{ID: testOffer.ID, SHA256: testOffer.SHA256}
	oldRef    = Ref{ID: rolloutsim.Old.ID, SHA256: rolloutsim.Old.SHA256}
)

func testPlan(maxFailed float64, minOutcomes int, waves ...Wave) *Plan {
	return &Plan{Name: "r1", Group: "g", Waves: waves, Offer: testOffer, Hash: "h1",
		Halt: HaltRule{MaxFailedPercent: maxFailed, MinOutcomes: minOutcomes, DeviceTimeout: time.Hour}}
}

func named(soak time.Duration, devices ...string) Wave { return Wave{Devices: devices, Soak: soak} }

// status is a device's status in group "g". what is "" (no outcome), a
// result of this rollout's offer (success, failed, …), "old-<result>" (a
// result for the previous release), "sha-<result>" (same id, another
// image), "refused-<code>" (this offer refused with code, in last_refusal
// as agents report it), "old-refused-<code>" (an earlier offer refused),
// "result-refused-<code>" (a rejected last_result, as agents reported
// refusals before last_refusal), "installing" (working on this offer) or
// "out" (not in the group).
func status(name, what string) ota.Status {
	st := ota.Status{Device: name, State: ota.Idle, Groups: []string{"g"}, LastResult: &ota.Outcome{ID: oldRef.ID, SHA256: oldRef.SHA256, Result: ota.ResultSuccess}}
	ours := &ota.Outcome{ID: testOffer.ID, SHA256: testOffer.SHA256}
	switch {
	case what == "":
	case what == "out":
		st.Groups = []string{"other"}
	case what == "installing":
		st.State = ota.Downloading
		st.Target = &ota.TargetStatus{ID: testOffer.ID, SHA256: testOffer.SHA256}
	case strings.HasPrefix(what, "old-refused-"):
		st.LastRefusal = &ota.Refusal{ID: oldRef.ID, SHA256: oldRef.SHA256, Code: ota.Code(strings.TrimPrefix(what, "old-refused-"))}
	case strings.HasPrefix(what, "old-"):
		st.LastResult.Result = ota.Result(strings.TrimPrefix(what, "old-"))
	case strings.HasPrefix(what, "sha-"):
		st.LastResult = &ota.Outcome{ID: testOffer.ID, SHA256: strings.Repeat("c", 64), Result: ota.Result(strings.TrimPrefix(what, "sha-"))}
	case strings.HasPrefix(what, "refused-"):
		st.LastRefusal = &ota.Refusal{ID: testOffer.ID, SHA256: testOffer.SHA256, Code: ota.Code(strings.TrimPrefix(what, "refused-"))}
	case strings.HasPrefix(what, "result-refused-"):
		ours.Result, ours.Code = ota.ResultRejected, ota.Code(strings.TrimPrefix(what, "result-refused-"))
		st.LastResult = ours
	default:
		ours.Result = ota.Result(what)
		st.LastResult = ours
	}
	return st
}

// view builds a ready view of devices in group "g", each "name" or
// "name=what" (status), all heard of at t0.
func view(devs ...string) View {
	m := DeviceMap{}
	for _, d := range devs {
		name, what, _ := strings.Cut(d, "=")
		m[name] = Observed("r1", "g", testRef, name, status(name, what), nil, t0)
	}
	return View{Ready: true, Devices: m}
}

// step is one input at a time after t0.
type step struct {
	at time.Duration
	in Input
}

// sentWave stands for the driver confirming the last offers asked for in
// a wave, and stepping again at once on the last view (as Driver does).
type sentWave struct{ wave int }

func (sentWave) isInput() {}

func obs(at time.Duration, devs ...string) step { return step{at, Observe{View: view(devs...)}} }
func sent(at time.Duration, wave int) step      { return step{at, sentWave{wave}} }
func cmd(at time.Duration, op Op, id string) step {
	return step{at, Command{ID: id, Op: op, By: "op", Time: t0.Add(at)}}
}

// tape is what a run of steps has written: the records, and the last
// view and offer.
type tape struct {
	records map[string]Record
	last    View
	offer   *Offer
}

func newTape() *tape { return &tape{records: map[string]Record{}} }

// feed runs one step as the driver would: records given to the view,
// PublishRecord actions kept, a sentWave confirmed with the last offer's
// cursor and followed by an observation.
func (w *tape) feed(s State, p *Plan, st step) (State, []Action) {
	now := t0.Add(st.at)
	in := st.in
	if sw, ok := in.(sentWave); ok {
		var through Place
		if w.offer != nil && w.offer.Wave == sw.wave {
			through = w.offer.Through
		}
		s, _ = w.apply(Step(s, p, Offered{Wave: sw.wave, Through: through}, now))
		in = Observe{View: w.last}
	}
	if o, ok := in.(Observe); ok {
		o.View.Records = w.records
		if o.View.Devices != nil {
			w.last = o.View
		}
		in = o
	}
	return w.apply(Step(s, p, in, now))
}

func (w *tape) apply(s State, acts []Action) (State, []Action) {
	for _, a := range acts {
		switch a := a.(type) {
		case PublishRecord:
			w.records[a.Record.Device] = a.Record
		case Offer:
			if !a.CatchUp {
				o := a
				w.offer = &o
			}
		}
	}
	return s, acts
}

// run feeds steps from a fresh state and returns the final state and the
// last step's actions, rendered.
func run(t *testing.T, p *Plan, steps ...step) (State, string) {
	t.Helper()
	s, _, last := runTape(t, p, steps...)
	return s, last
}

func runTape(t *testing.T, p *Plan, steps ...step) (State, *tape, string) {
	t.Helper()
	w := newTape()
	s := NewState(p, t0)
	var last []Action
	for _, st := range steps {
		s, last = w.feed(s, p, st)
	}
	return s, w, acts(last)
}

// acts renders actions compactly: "record(d1) state offer(1:d1,d2) halt
// finish abort", or "none".
func acts(as []Action) string {
	var out []string
	for _, a := range as {
		switch a := a.(type) {
		case PublishState:
			out = append(out, "state")
		case PublishRecord:
			out = append(out, fmt.Sprintf("record(%s)", a.Record.Device))
		case Offer:
			kind := "offer"
			if a.CatchUp {
				kind = "again"
			}
			out = append(out, fmt.Sprintf("%s(%d:%s)", kind, a.Wave, strings.Join(a.Devices, ",")))
		case Halt:
			out = append(out, "halt")
		case Finish:
			out = append(out, "finish")
		case Abort:
			out = append(out, "abort")
		case Refused:
			out = append(out, "refused")
		case LeaseLost:
			out = append(out, "lease-lost")
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, " ")
}
