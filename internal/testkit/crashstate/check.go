package crashstate

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/otad/otad/agent"
	"github.com/otad/otad/ota"
)

// The invariants, checked in every state:
//   - at every power-on the bootloader picks a slot holding a verified
//     image the journal names (the factory image on a slot the journal has
//     nothing for), never a half-written one (checkBoot);
//   - what the agent publishes is true: a slot it says holds an image
//     holds it, and success means the image runs and is committed (the
//     publisher); a result, once published, is the one the update ends
//     with; seqs only grow;
//   - the update ends: on the new image committed or back on the old one,
//     with the result the scenario allows, and the bootloader's next boot
//     is the slot that runs (checkEnd); rolled_back_by_bootloader only when
//     the bootloader did try the new slot as often as it may, or lost its
//     environment;
//   - nothing that ended starts again.

// history is what happened before the power cut (from the trace) and
// since: the boots and the events published.
type history struct {
	mu     sync.Mutex
	marks  []Mark
	events []ota.Event
}

func newHistory(prior []Op) *history {
	h := &history{}
	for _, op := range prior {
		if op.Kind == OpMark {
			h.add(op.Mark)
		}
	}
	return h
}

func (h *history) add(m Mark) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.marks = append(h.marks, m)
	if m.Kind == MarkEvent {
		h.events = append(h.events, m.Event)
	}
}

// boots is how many power-ons there were.
func (h *history) boots() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, m := range h.marks {
		if m.Kind == MarkBoot {
			n++
		}
	}
	return n
}

// tried is how often slot was picked since the last event that said
// result of the offer sha ("" : since the start), and whether the
// bootloader ran on its built-in environment meanwhile.
func (h *history) tried(slot ota.Slot, sha string, result ota.Result) (n int, lostEnv bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range h.marks {
		switch {
		case m.Kind == MarkEvent && result != "" && m.Event.SHA256 == sha && m.Event.Result == result:
			n, lostEnv = 0, false
		case m.Kind == MarkBoot:
			if m.Slot == slot {
				n++
			}
			lostEnv = lostEnv || m.DefaultEnv
		}
	}
	return n, lostEnv
}

// checkEvents: seqs grow; once the offer has a result it keeps it and never
// starts again.
func (h *history) checkEvents(fail func(string, ...any), sha string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var last uint64
	var result ota.Result
	for _, ev := range h.events {
		if ev.Seq <= last {
			fail("event seq %d after seq %d (%s>%s): seqs must only grow", ev.Seq, last, ev.From, ev.To)
		}
		last = max(last, ev.Seq)
		if ev.SHA256 != sha {
			continue
		}
		if result != "" && ev.To == ota.Downloading && ev.From != ota.Downloading {
			fail("the offer ended (%s) and started again", result)
		}
		if ev.Result == "" {
			continue
		}
		if result != "" && ev.Result != result {
			fail("the offer was reported %s, then %s", result, ev.Result)
		}
		result = ev.Result
		if ev.Retryable {
			result = "" // the operator may start it again (docs/contract/installing.md)
		}
	}
}

// journal reads the journal under root; a missing one is a new device.
func (r *Rig) journal() (agent.State, error) {
	s, _, err := agent.Journal{Dir: filepath.Join(r.root, "state")}.Load()
	return s, err
}

// vouched says whether the journal vouches for what slot holds: an image
// it names by digest, or the factory image on slot A it has nothing for.
func (r *Rig) vouched(j agent.State, st *storage, slot ota.Slot) (bool, string) {
	sum := st.slots[slot].sha256(ImageSize)
	info := j.Slots[slot]
	if info.SHA256 == "" {
		return slot == ota.SlotA && sum == r.fx.OldSHA, sum
	}
	return info.SHA256 == sum, sum
}

func (r *Rig) checkBoot(out *Outcome, st *storage, slot ota.Slot) bool {
	j, err := r.journal()
	if err != nil {
		out.fail("the journal cannot be read at power-on: %v", err)
		return false
	}
	if ok, sum := r.vouched(j, st, slot); !ok {
		out.fail("the bootloader picked slot %s holding %.12s, which the journal (%s) does not name (%+v)", slot, sum, j.Phase, j.Slots[slot])
		return false
	}
	return true
}

// publisher checks each status the agent publishes and records its events.
type publisher struct {
	r       *Rig
	st      *storage
	h       *history
	out     *Outcome
	changed chan struct{}
}

func (p *publisher) Publish(s ota.Status, ev ota.Event) {
	m := Mark{Kind: MarkEvent, Event: ev}
	p.st.trace.mark(m)
	p.h.add(m)
	for slot, info := range s.Slots {
		if info.SHA256 == "" {
			continue
		}
		if sum := p.st.slots[slot].sha256(ImageSize); sum != info.SHA256 {
			p.out.fail("status (%s) says slot %s holds %.12s; it holds %.12s", s.State, slot, info.SHA256, sum)
		}
	}
	// Success is said once, in its event: the image runs and is committed
	// then. (Later statuses carry it as the last result, also after the
	// bootloader fell back; the end check judges that.)
	if r := s.LastResult; r != nil && ev.Result == ota.ResultSuccess && ev.SHA256 == p.r.fx.NewSHA && r.SHA256 == ev.SHA256 {
		if sum := p.st.slots[s.BootedSlot].sha256(ImageSize); sum != r.SHA256 {
			p.out.fail("status says success on slot %s, which holds %.12s", s.BootedSlot, sum)
		}
		if prim := p.r.sc.Boot.primary(p.r.root); prim != s.BootedSlot {
			p.out.fail("status says success on slot %s, and the next boot picks %q: not committed", s.BootedSlot, prim)
		}
	}
	select {
	case p.changed <- struct{}{}:
	default:
	}
}

// Progress wakes the rig too: the Cancel scenario's operator acts mid-download.
func (p *publisher) Progress(ota.Progress) {
	select {
	case p.changed <- struct{}{}:
	default:
	}
}

// checkEnd checks the device after the update settled: the journal has the
// offer's result, the slot that runs holds what the journal says, and the
// next boot picks it.
func (r *Rig) checkEnd(out *Outcome, st *storage) {
	j, err := r.journal()
	if err != nil {
		out.fail("the journal cannot be read at the end: %v", err)
		return
	}
	res := j.LastResult
	if j.Phase != ota.Idle || res == nil || res.SHA256 != r.fx.NewSHA {
		out.fail("did not settle: journal %s, last result %+v", j.Phase, res)
		return
	}
	out.Result = res
	if ok, sum := r.vouched(j, st, out.Booted); !ok {
		out.fail("ended on slot %s holding %.12s, which the journal does not name", out.Booted, sum)
	}
	if prim := r.sc.Boot.primary(r.root); prim != out.Booted {
		out.fail("ended on slot %s, and the next boot picks %q", out.Booted, prim)
	}
	out.runs = st.slots[out.Booted].sha256(ImageSize)
	r.checkRootEnd(out)
}

// judge checks what a run from a state found against what came before the
// power cut (prior): the events, the boots, and how the update ended. It
// returns the violations and how the update ended.
func (r *Rig) judge(out *Outcome, prior []Op) ([]string, string) {
	vs := slices.Clone(out.Violations)
	fail := func(format string, a ...any) { vs = append(vs, fmt.Sprintf(format, a...)) }
	h := newHistory(prior)
	for _, m := range out.marks {
		h.add(m)
	}
	h.checkEvents(fail, r.fx.NewSHA)
	res := out.Result
	if len(vs) > 0 || res == nil {
		return vs, "violation"
	}
	want := map[End]ota.Code{Commit: "", Rollback: ota.CodeHealthCheckFailed, Cancel: "", MarkActive: "", Rotate: ""}[r.sc.End]
	booted, runs, end := out.Booted, out.runs, string(res.Result)
	switch {
	case res.Result == ota.ResultSuccess && res.Code == want && booted == ota.SlotA:
		// Committed, then a power cut during a boot: the bootloader may fall
		// back by its rules (GRUB's one try; U-Boot's attempts, or its
		// built-in environment when a single copy tore).
		if n, lost := h.tried(ota.SlotB, r.fx.NewSHA, ota.ResultSuccess); runs != r.fx.OldSHA || n < r.sc.Boot.Tries() && !lost {
			fail("success, then slot A (holding %.12s) runs; the bootloader tried B %d times since", runs, n)
		}
		end = "success, then fell back"
	case res.Result == ota.ResultSuccess && res.Code == want:
		if booted != ota.SlotB || runs != r.fx.NewSHA {
			fail("success, and the device runs %.12s on slot %s", runs, booted)
		}
	case res.Result == ota.ResultFailed && res.Code == want:
		if booted != ota.SlotA || runs != r.fx.OldSHA {
			fail("failed, and the device runs %.12s on slot %s", runs, booted)
		}
	case res.Result == ota.ResultRolledBack && res.Code == ota.CodeRolledBackByBootloader:
		if booted != ota.SlotA || runs != r.fx.OldSHA {
			fail("rolled back, and the device runs %.12s on slot %s", runs, booted)
		}
		if n, lost := h.tried(ota.SlotB, "", ""); n < r.sc.Boot.Tries() && !lost {
			fail("rolled_back_by_bootloader, but the bootloader tried the new slot %d times of %d", n, r.sc.Boot.Tries())
		}
	case r.sc.End == MarkActive && res.Result == ota.ResultFailed && res.Code == ota.CodeCancelled && !res.Retryable:
		// The power went after the drop was journaled and before the
		// bootloader heard it: the dropped slot came up, was marked bad and left.
		if booted != ota.SlotA || runs != r.fx.OldSHA {
			fail("dropped, and the device runs %.12s on slot %s", runs, booted)
		}
		end = "dropped, its slot came up: marked bad"
	default:
		fail("ended %s %s (%s): not an end of a %s update", res.Result, res.Code, res.Message, r.sc.End)
	}
	if len(vs) > 0 {
		end = "violation"
	}
	return vs, end
}

// errNotSettled is a setup run that did not end idle.
var errNotSettled = errors.New("the device did not settle")

// image reads what a run left into an image.
func (r *Rig) image(st *storage) (*Image, error) {
	if _, err := os.Stat(r.root); err != nil {
		return nil, err
	}
	return readImage(r.root, map[string][]byte{"A": st.slots[ota.SlotA].bytes(), "B": st.slots[ota.SlotB].bytes()})
}
