package rollout

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/ota"
)

var t0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

// The offer every test plan releases, and the image the fleet ran before.
var (
	testOffer = PlanOffer{ID: "rel-2", Version: "2.0", SHA256: strings.Repeat("b", 64)}
	oldRef    = Ref{ID: "rel-1", SHA256: strings.Repeat("a", 64)}
)

func testPlan(maxFailed float64, minOutcomes int, waves ...Wave) *Plan {
	return &Plan{Name: "r1", Group: "g", Waves: waves, Offer: testOffer, Hash: "h1",
		Halt: HaltRule{MaxFailedPercent: maxFailed, MinOutcomes: minOutcomes, DeviceTimeout: time.Hour}}
}

func named(soak time.Duration, devices ...string) Wave { return Wave{Devices: devices, Soak: soak} }

// view builds a ready view of devices in group "g". Each argument is
// "name" (no outcome), or "name=what" where what is a result of this
// rollout's offer (success, failed, …), "old-<result>" (a result for the
// previous release), "sha-<result>" (same id, another image) or
// "refused-<code>" (this offer refused with code, in last_refusal as
// agents report it), "old-refused-<code>" (an earlier offer refused) or
// "result-refused-<code>" (a rejected last_result, as agents reported
// refusals before last_refusal).
func view(devs ...string) View {
	v := View{Ready: true, Devices: map[string]ota.Status{}}
	for _, d := range devs {
		name, what, _ := strings.Cut(d, "=")
		st := ota.Status{Device: name, State: ota.Idle, Groups: []string{"g"}, LastResult: &ota.Outcome{ID: oldRef.ID, SHA256: oldRef.SHA256, Result: ota.ResultSuccess}}
		ours := &ota.Outcome{ID: testOffer.ID, SHA256: testOffer.SHA256}
		switch {
		case what == "":
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
		v.Devices[name] = st
	}
	return v
}

// step is one input at a time after t0.
type step struct {
	at time.Duration
	in Input
}

func obs(at time.Duration, devs ...string) step { return step{at, Observe{View: view(devs...)}} }
func sent(at time.Duration, wave int) step      { return step{at, Offered{Wave: wave}} }
func cmd(at time.Duration, op Op, id string) step {
	return step{at, Command{ID: id, Op: op, By: "op", Time: t0.Add(at)}}
}

// run feeds steps from a fresh state and returns the final state and the
// last step's actions, rendered.
func run(t *testing.T, p *Plan, steps ...step) (State, string) {
	t.Helper()
	s := NewState(p, t0)
	var last []Action
	for _, st := range steps {
		s, last = Step(s, p, st.in, t0.Add(st.at))
	}
	return s, acts(last)
}

// acts renders actions compactly: "state offer(1:d1,d2) halt finish abort", or "none".
func acts(as []Action) string {
	var out []string
	for _, a := range as {
		switch a := a.(type) {
		case PublishState:
			out = append(out, "state")
		case Offer:
			out = append(out, fmt.Sprintf("offer(%d:%s)", a.Wave, strings.Join(a.Devices, ",")))
		case Halt:
			out = append(out, "halt")
		case Finish:
			out = append(out, "finish")
		case Abort:
			out = append(out, "abort")
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, " ")
}
