package rollout

import (
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/ota"
)

// restarted is s as a controller started again reads it back from the
// broker: the published state alone.
func restarted(t *testing.T, s State) State {
	t.Helper()
	b, err := s.Encode()
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeState(b)
	if err != nil {
		t.Fatal(err)
	}
	return back
}

// keptView is view with devices' earlier outcomes kept as a tracker keeps
// them (Observed with what was known before).
func keptView(prev View, devs ...string) View {
	v := view(devs...)
	m := v.Devices.(DeviceMap)
	for id, d := range m {
		if old, ok := prev.lookup(id); ok {
			name, what, _ := strings.Cut(id+"="+whatOf(devs, id), "=")
			m[id] = Observed("r1", "g", testRef, name, status(name, what), &old, t0)
		} else {
			m[id] = d
		}
	}
	return v
}

func whatOf(devs []string, id string) string {
	for _, d := range devs {
		if n, w, _ := strings.Cut(d, "="); n == id {
			return w
		}
	}
	return ""
}

// Per-device records keep what a device's status cannot show: an outcome
// decided from a status that has moved on to another image. A restarted
// controller given them (and the devices' statuses) counts the same.
func TestRecordsKeepMovedOutcomes(t *testing.T) {
	p := testPlan(50, 1, named(0, "d1", "d2"), named(0, "d3"))
	w := newTape()
	s := NewState(p, t0)
	s, _ = w.feed(s, p, obs(0, "d1", "d2", "d3"))
	s, _ = w.feed(s, p, sent(time.Minute, 1))
	first := view("d1=success", "d2", "d3")
	s, _ = w.feed(s, p, step{2 * time.Minute, Observe{View: first}})
	// d1 is offered something else: its status shows another image now.
	moved := keptView(first, "d1=old-success", "d2", "d3")
	s, as := w.feed(s, p, step{3 * time.Minute, Observe{View: moved}})
	if got := acts(as); got != "record(d1) state" || w.records["d1"].Kept != ota.ResultSuccess || s.Counts.Success != 1 || s.Records != 1 {
		t.Fatalf("actions %s, records %+v, counts %+v", got, w.records, s.Counts)
	}
	// Restarted: the tracker has forgotten, the record has not.
	s = restarted(t, s)
	s, _ = w.feed(s, p, obs(4*time.Minute, "d1=old-success", "d2=success", "d3"))
	if s.Counts.Success != 2 || s.Counts.Pending != 0 || s.Wave != 2 {
		t.Errorf("after a restart: wave %d, counts %+v", s.Wave, s.Counts)
	}
}

// A restarted controller cannot tell which members behind its wave's
// cursor the last one offered: those that show no sign of the offer (no
// outcome, not installing it) are offered again, once; those installing it
// are not. Within a run, a device heard of after its place was passed (it
// came online late) is offered when it is heard of.
func TestCatchUp(t *testing.T) {
	p := testPlan(50, 1, named(0, "d1", "d2", "d3"), Wave{Percent: 100})
	w := newTape()
	s := NewState(p, t0)
	s, _ = w.feed(s, p, obs(0, "d1", "d2", "d3"))
	s, _ = w.feed(s, p, sent(time.Minute, 1))
	s = restarted(t, s)
	s, as := w.feed(s, p, obs(2*time.Minute, "d1=installing", "d2", "d3=success"))
	if got := acts(as); got != "state again(1:d2)" {
		t.Fatalf("restart: %s", got)
	}
	s, _ = w.apply(Step(s, p, CaughtUp{N: 1}, t0.Add(2*time.Minute)))
	if _, as = w.feed(s, p, obs(3*time.Minute, "d1=installing", "d2", "d3=success")); acts(as) != "none" {
		t.Fatalf("offered again twice: %s", acts(as))
	}

	// Wave 2 (100%) offered to e1, e2; then e3 comes online behind the cursor.
	s, _ = w.feed(s, p, obs(4*time.Minute, "d1=success", "d2=success", "d3=success", "e1", "e2"))
	s, _ = w.feed(s, p, sent(4*time.Minute, 2))
	if s.Wave != 2 || s.Waves[1].Offered.IsZero() || s.Counts.Devices != 5 {
		t.Fatalf("wave %d %+v counts %+v", s.Wave, s.Waves[1], s.Counts)
	}
	late := view("d1=success", "d2=success", "d3=success", "e1", "e2", "e3")
	late.Devices.(DeviceMap)["e3"] = Observed("r1", "g", testRef, "e3", status("e3", ""), nil, t0.Add(5*time.Minute))
	if _, as = w.feed(s, p, step{5 * time.Minute, Observe{View: late}}); !strings.Contains(acts(as), "again(2:e3)") {
		t.Errorf("a device heard of late: %s", acts(as))
	}
}

// The case: a resume must accept devices, not a count. At
// max_failed_percent 0, two canaries time out and the rollout halts; an
// operator resumes (accepting those two); they then report success after
// all; two devices of wave 2 fail. The rollout halts in wave 2 and wave 3
// is never offered (with a count of 2 accepted, 2 new failures would stay
// under it).
func TestResumeAcceptsDevicesNotACount(t *testing.T) {
	p := testPlan(0, 1, named(0, "d1", "d2", "d3", "d4"), named(0, "d5", "d6"), named(0, "d7"))
	all := []string{"d1", "d2", "d3", "d4", "d5", "d6", "d7"}
	s, w, last := runTape(t, p,
		obs(0, all...), sent(time.Minute, 1),
		obs(2*time.Minute, "d1", "d2", "d3=success", "d4=success", "d5", "d6", "d7"),
		obs(62*time.Minute, "d1", "d2", "d3=success", "d4=success", "d5", "d6", "d7"),
	)
	if s.Phase != PhaseHalted || s.Counts.TimedOut != 2 || last != "state halt" {
		t.Fatalf("%s %+v %s", s.Phase, s.Counts, last)
	}
	s, _ = w.feed(s, p, cmd(63*time.Minute, OpResume, "c1"))
	s, as := w.feed(s, p, obs(64*time.Minute, "d1", "d2", "d3=success", "d4=success", "d5", "d6", "d7"))
	if got := acts(as); !strings.HasPrefix(got, "record(d1) record(d2) state offer(2:") && !strings.HasPrefix(got, "record(d2) record(d1) state offer(2:") {
		t.Errorf("resume step: %s", got)
	}
	if w.records["d1"].Accepted != TimedOut || w.records["d2"].Accepted != TimedOut || s.Accepted != 2 {
		t.Fatalf("records %+v, accepted %d", w.records, s.Accepted)
	}
	s, _ = w.feed(s, p, sent(65*time.Minute, 2))
	s, as = w.feed(s, p, obs(66*time.Minute, "d1=success", "d2=success", "d3=success", "d4=success", "d5=failed", "d6=failed", "d7"))
	if s.Phase != PhaseHalted || s.Wave != 2 || !strings.Contains(acts(as), "halt") {
		t.Fatalf("after two new failures: %s in wave %d (%s), actions %s", s.Phase, s.Wave, s.Reason, acts(as))
	}
	if w.offer.Wave == 3 {
		t.Fatal("wave 3 was offered")
	}
	// The accepted devices succeeded: they no longer count as failed, nor
	// as accepted failures.
	if !strings.Contains(s.Reason, "2 of 6 devices with an outcome failed") {
		t.Errorf("reason %q", s.Reason)
	}
}

// A failure the resume accepted is left out of the rule; the others are
// judged on their own.
func TestAcceptedFailuresAreLeftOut(t *testing.T) {
	p := testPlan(20, 1, named(0, "d1", "d2"), named(0, "d3", "d4", "d5", "d6", "d7"))
	all := []string{"d1", "d2", "d3", "d4", "d5", "d6", "d7"}
	s, w, _ := runTape(t, p, obs(0, all...), sent(time.Minute, 1), obs(2*time.Minute, "d1=success", "d2=rolled_back", "d3", "d4", "d5", "d6", "d7"))
	if s.Phase != PhaseHalted {
		t.Fatalf("%s", s.Phase)
	}
	s, _ = w.feed(s, p, cmd(3*time.Minute, OpResume, "c1"))
	s, _ = w.feed(s, p, obs(4*time.Minute, "d1=success", "d2=rolled_back", "d3", "d4", "d5", "d6", "d7"))
	s, _ = w.feed(s, p, sent(5*time.Minute, 2))
	// One failure in five (20%): at max_failed_percent 20 it goes on.
	s, _ = w.feed(s, p, obs(6*time.Minute, "d1=success", "d2=rolled_back", "d3=failed", "d4=success", "d5=success", "d6=success", "d7=success"))
	if s.Phase != PhaseFinished {
		t.Fatalf("%s: %s", s.Phase, s.Reason)
	}
}

// A batch cut short (the broker slow, the lease due) is confirmed as far as
// it went out: the cursor moves there, and the rest of the batch is asked
// for again, not the whole.
func TestPartlyOffered(t *testing.T) {
	p := testPlan(50, 1, Wave{Percent: 100})
	devs := []string{"d1", "d2", "d3", "d4", "d5", "d6"}
	w := newTape()
	s, as := w.feed(NewState(p, t0), p, obs(0, devs...))
	o := w.offer
	if o == nil || len(o.Devices) != 6 {
		t.Fatalf("first batch: %s", acts(as))
	}
	mid := PlaceOf(p.Name, o.Devices[2])
	s, _ = Step(s, p, Offered{Wave: 1, Through: mid}, t0)
	if s.Waves[0].Cursor == nil || *s.Waves[0].Cursor != mid || s.Waves[0].Next == nil {
		t.Fatalf("after three of six: %+v", s.Waves[0])
	}
	_, as = w.feed(s, p, obs(time.Second, devs...))
	if got, want := acts(as), "offer(1:"+strings.Join(o.Devices[3:], ",")+")"; !strings.HasSuffix(got, want) {
		t.Errorf("the rest: %s, want %s", got, want)
	}
	// A confirmation beyond the batch, or behind the cursor, is ignored.
	for _, bad := range []Place{mid, PlaceOf(p.Name, o.Devices[0])} {
		if again, _ := Step(s, p, Offered{Wave: 1, Through: bad}, t0); *again.Waves[0].Cursor != mid {
			t.Errorf("confirming %s moved the cursor to %s", bad, again.Waves[0].Cursor)
		}
	}
}
