package agent

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/ota"
)

var t0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

func tgt(name string, minute int) Target {
	return Target{
		ID: "rel-" + name, Version: name, SecurityVersion: 1,
		IssuedAt: t0.Add(time.Duration(minute) * time.Minute),
		Payload:  ota.Payload{URL: "https://x/" + name, Compression: "none", Size: 100, SHA256: strings.Repeat(name[:1], 64)},
	}
}

// fresh is a device booted from A with a committed image "o" (old).
func fresh() State {
	return State{Phase: ota.Idle, Booted: "A", BootID: "b1", Slots: map[ota.Slot]SlotInfo{
		"A": {ID: "rel-o", Version: "o", SHA256: strings.Repeat("o", 64), Status: ota.SlotGood},
	}}
}

// fx renders effects compactly, e.g. "persist emit(idle>downloading) mark(bad,B) install(rel-n)".
func fx(effects []Effect) string {
	var out []string
	for _, e := range effects {
		switch e := e.(type) {
		case Persist:
			out = append(out, "persist")
		case Emit:
			s := fmt.Sprintf("emit(%s>%s", e.Event.From, e.Event.To)
			if e.Event.Result != "" {
				s += "," + string(e.Event.Result)
			}
			if e.Event.Code != "" {
				s += "," + string(e.Event.Code)
			}
			out = append(out, s+")")
		case Mark:
			out = append(out, fmt.Sprintf("mark(%s,%s)", e.Op, e.Slot))
		case StartInstall:
			out = append(out, fmt.Sprintf("install(%s>%s)", e.Target.ID, e.Target.Slot))
		case CancelInstall:
			out = append(out, "cancel")
		case Reboot:
			out = append(out, "reboot")
		case StartHealth:
			out = append(out, "health")
		case PublishProgress:
			out = append(out, "progress")
		case RetryLater:
			out = append(out, fmt.Sprintf("retry(%s,%d)", e.Target.ID, e.Target.Try))
		}
	}
	return strings.Join(out, " ")
}

// run feeds events and returns the final state and the last step's effects.
func run(t *testing.T, s State, p Policy, evs ...Event) (State, string) {
	t.Helper()
	var last []Effect
	for _, ev := range evs {
		s, last = Step(s, p, time.Time{}, ev)
	}
	return s, fx(last)
}

// Generation numbers follow installs: the first install of a fresh state is 1.
func done(gen uint64, code ota.Code) Event {
	return EvInstallDone{Gen: gen, Code: code, Message: string(code)}
}

func TestStep(t *testing.T) {
	imm := Policy{RebootImmediately: true, MaxRestarts: 2}
	manual := Policy{MaxRestarts: 2}
	n, m, o := tgt("n", 1), tgt("m", 2), tgt("o", 3)
	atRebooting := func() State {
		s, _ := run(t, fresh(), imm, EvOffer{Target: n}, done(1, ""))
		return s
	}
	tests := []struct {
		name       string
		start      State
		policy     Policy
		events     []Event
		phase      ota.Phase
		result     ota.Result // last_result.result
		code       ota.Code
		effects    string // of the last event; "none" for none, "" not checked
		targetID   string
		pendingID  string
		checkState func(t *testing.T, s State)
	}{
		{name: "idle offer starts install into inactive slot after marking it bad",
			start: fresh(), policy: imm, events: []Event{EvOffer{Target: n}}, phase: ota.Downloading,
			effects: "persist emit(idle>downloading) mark(bad,B) install(rel-n>B)", targetID: "rel-n",
			checkState: func(t *testing.T, s State) {
				if !reflect.DeepEqual(s.Slots["B"], SlotInfo{}) {
					t.Errorf("slot B not forgotten before writing: %+v", s.Slots["B"])
				}
			}},
		{name: "offer equal to the booted committed image is up to date",
			start: fresh(), policy: imm, events: []Event{EvOffer{Target: o}}, phase: ota.Idle, result: ota.ResultUpToDate,
			effects: "persist emit(idle>idle,up_to_date)"},
		{name: "duplicate of the install in progress changes nothing",
			start: fresh(), policy: imm, events: []Event{EvOffer{Target: n}, EvOffer{Target: n}}, phase: ota.Downloading,
			effects: "persist emit(downloading>downloading)", targetID: "rel-n"},
		{name: "newer offer while downloading supersedes",
			start: fresh(), policy: imm, events: []Event{EvOffer{Target: n}, EvOffer{Target: m}}, phase: ota.Downloading,
			result: ota.ResultSuperseded, targetID: "rel-m",
			effects: "cancel persist emit(downloading>downloading,superseded) persist emit(downloading>downloading) mark(bad,B) install(rel-m>B)"},
		{name: "newer offer while verifying supersedes",
			start: fresh(), policy: imm, events: []Event{EvOffer{Target: n}, EvProgress{Gen: 1, Progress: ota.Progress{Phase: ota.Verifying, BytesDone: 100, BytesTotal: 100}}, EvOffer{Target: m}},
			phase: ota.Downloading, result: ota.ResultSuperseded, targetID: "rel-m",
			effects: "cancel persist emit(verifying>verifying,superseded) persist emit(verifying>downloading) mark(bad,B) install(rel-m>B)"},
		{name: "offer for the booted image while downloading cancels and is up to date",
			start: fresh(), policy: imm, events: []Event{EvOffer{Target: n}, EvOffer{Target: o}}, phase: ota.Idle, result: ota.ResultUpToDate,
			effects: "cancel persist emit(downloading>downloading,superseded) persist emit(downloading>idle,up_to_date)"},
		{name: "progress moves to verifying once",
			start: fresh(), policy: imm, events: []Event{EvOffer{Target: n}, EvProgress{Gen: 1, Progress: ota.Progress{Phase: ota.Verifying, BytesDone: 50, BytesTotal: 100}}},
			phase: ota.Verifying, effects: "persist emit(downloading>verifying) progress", targetID: "rel-n"},
		{name: "progress of an old writer is ignored",
			start: fresh(), policy: imm, events: []Event{EvOffer{Target: n}, EvOffer{Target: m}, EvProgress{Gen: 1, Progress: ota.Progress{Phase: ota.Verifying}}},
			phase: ota.Downloading, effects: "none", targetID: "rel-m"},
		{name: "verified write stages, flips and reboots (immediate)",
			start: fresh(), policy: imm, events: []Event{EvOffer{Target: n}, done(1, "")}, phase: ota.Rebooting, targetID: "rel-n",
			effects: "persist emit(downloading>staged) mark(active,B) persist emit(staged>rebooting) reboot",
			checkState: func(t *testing.T, s State) {
				if s.Slots["B"].Status != ota.SlotStaged || s.Slots["B"].SHA256 != n.SHA256() {
					t.Errorf("slot B = %+v", s.Slots["B"])
				}
			}},
		{name: "manual policy flips but does not reboot",
			start: fresh(), policy: manual, events: []Event{EvOffer{Target: n}, done(1, "")}, phase: ota.Rebooting, targetID: "rel-n",
			effects: "persist emit(downloading>staged) mark(active,B) persist emit(staged>rebooting)"},
		{name: "failed write is final and leaves the slot marked bad",
			start: fresh(), policy: imm, events: []Event{EvOffer{Target: n}, done(1, "hash_mismatch")}, phase: ota.Idle,
			result: ota.ResultFailed, code: "hash_mismatch", effects: "persist emit(downloading>idle,failed,hash_mismatch)"},
		{name: "late completion of a cancelled writer is ignored",
			start: fresh(), policy: imm, events: []Event{EvOffer{Target: n}, EvOffer{Target: m}, done(1, "")}, phase: ota.Downloading,
			targetID: "rel-m", effects: "none", result: ota.ResultSuperseded},
		{name: "redelivery of a failed offer does not retry",
			start: fresh(), policy: imm, events: []Event{EvOffer{Target: n}, done(1, "hash_mismatch"), EvOffer{Target: n}}, phase: ota.Idle,
			result: ota.ResultFailed, code: "hash_mismatch", effects: "persist emit(idle>idle)"},
		{name: "a newer offer of the same image tries again",
			start: fresh(), policy: imm, events: []Event{EvOffer{Target: n}, done(1, "hash_mismatch"), EvOffer{Target: func() Target { x := n; x.IssuedAt = x.IssuedAt.Add(time.Hour); return x }()}},
			phase: ota.Downloading, targetID: "rel-n", result: ota.ResultFailed, effects: "persist emit(idle>downloading) mark(bad,B) install(rel-n>B)"},
		{name: "newer offer while rebooting waits in the pending place",
			start: atRebooting(), policy: imm, events: []Event{EvOffer{Target: m}}, phase: ota.Rebooting, targetID: "rel-n", pendingID: "rel-m",
			effects: "persist emit(rebooting>rebooting)"},
		{name: "pending place keeps the newest",
			start: atRebooting(), policy: imm, events: []Event{EvOffer{Target: m}, EvOffer{Target: tgt("p", 9)}}, phase: ota.Rebooting, targetID: "rel-n", pendingID: "rel-p"},
		{name: "agent restart while rebooting (same boot) reboots again",
			start: atRebooting(), policy: imm, events: []Event{EvBoot{Booted: "A", BootID: "b1"}}, phase: ota.Rebooting, effects: "persist emit(rebooting>rebooting) reboot", targetID: "rel-n"},
		{name: "new boot on the target confirms",
			start: atRebooting(), policy: imm, events: []Event{EvBoot{Booted: "B", BootID: "b2"}}, phase: ota.Confirming, targetID: "rel-n",
			effects: "persist emit(rebooting>confirming) health"},
		{name: "new boot on the old slot: bootloader fell back",
			start: atRebooting(), policy: imm, events: []Event{EvBoot{Booted: "A", BootID: "b2"}}, phase: ota.Idle,
			result: ota.ResultRolledBack, code: ota.CodeRolledBackByBootloader,
			effects: "mark(bad,B) mark(good,A) persist emit(rebooting>idle,rolled_back,rolled_back_by_bootloader)"},
		{name: "health pass commits and raises the floor",
			start: atRebooting(), policy: imm, events: []Event{EvBoot{Booted: "B", BootID: "b2"}, EvHealth{OK: true}}, phase: ota.Idle,
			result: ota.ResultSuccess, effects: "mark(good,B) persist emit(confirming>idle,success)",
			checkState: func(t *testing.T, s State) {
				if s.SecurityFloor != 1 || s.Slots["B"].Status != ota.SlotGood || s.Target != nil {
					t.Errorf("floor %d slot B %+v target %v", s.SecurityFloor, s.Slots["B"], s.Target)
				}
			}},
		{name: "health failure marks bad and reboots into the old slot",
			start: atRebooting(), policy: manual, events: []Event{EvBoot{Booted: "B", BootID: "b2"}, EvHealth{OK: false, Message: "x"}},
			phase: ota.Idle, result: ota.ResultFailed, code: ota.CodeHealthCheckFailed,
			effects: "persist emit(confirming>idle,failed,health_check_failed) mark(bad,B) reboot"},
		{name: "after a health failure the old slot boots and stays idle",
			start: atRebooting(), policy: imm, events: []Event{EvBoot{Booted: "B", BootID: "b2"}, EvHealth{OK: false}, EvBoot{Booted: "A", BootID: "b3"}},
			phase: ota.Idle, result: ota.ResultFailed, effects: "persist mark(good,A) mark(bad,B) persist emit(idle>idle)"},
		{name: "crash after rejecting, same boot on the bad slot: leave again, never commit",
			start: atRebooting(), policy: imm, events: []Event{EvBoot{Booted: "B", BootID: "b2"}, EvHealth{OK: false}, EvBoot{Booted: "B", BootID: "b2"}},
			phase: ota.Idle, effects: "persist mark(bad,B) reboot"},
		{name: "success starts the pending offer into the now inactive slot",
			start: atRebooting(), policy: imm, events: []Event{EvOffer{Target: m}, EvBoot{Booted: "B", BootID: "b2"}, EvHealth{OK: true}},
			phase: ota.Downloading, targetID: "rel-m", result: ota.ResultSuccess,
			// Slot A holds the last release, bootable: the bootloader hears first (issue 27).
			effects: "mark(good,B) persist emit(confirming>idle,success) mark(bad,A) persist emit(idle>downloading) install(rel-m>A)"},
		{name: "interrupted download restarts from scratch after a restart",
			start: fresh(), policy: imm, events: []Event{EvOffer{Target: n}, EvBoot{Booted: "A", BootID: "b1"}}, phase: ota.Downloading, targetID: "rel-n",
			effects: "persist mark(good,A) persist emit(downloading>downloading) mark(bad,B) install(rel-n>B)",
			checkState: func(t *testing.T, s State) {
				if s.Restarts != 1 {
					t.Errorf("restarts = %d", s.Restarts)
				}
			}},
		{name: "an install interrupted too often is given up",
			start: fresh(), policy: imm, events: []Event{EvOffer{Target: n}, EvBoot{Booted: "A", BootID: "b1"}, EvBoot{Booted: "A", BootID: "b2"}, EvBoot{Booted: "A", BootID: "b3"}},
			phase: ota.Idle, result: ota.ResultFailed, code: ota.CodeCancelled},
		{name: "staged, flipped, new boot on the old slot: fell back",
			start: func() State {
				s, _ := run(t, fresh(), imm, EvOffer{Target: n})
				s.Phase = ota.Staged
				return s
			}(), policy: imm, events: []Event{EvBoot{Booted: "A", BootID: "b9", FirstInOrder: "B"}}, phase: ota.Idle, result: ota.ResultRolledBack},
		{name: "staged, power cut before the flip: flip now and reboot",
			start: func() State {
				s, _ := run(t, fresh(), imm, EvOffer{Target: n})
				s.Phase = ota.Staged
				return s
			}(), policy: imm, events: []Event{EvBoot{Booted: "A", BootID: "b9", FirstInOrder: "A"}}, phase: ota.Rebooting, targetID: "rel-n",
			effects: "persist mark(good,A) mark(active,B) persist emit(staged>rebooting) reboot"},
		{name: "staged, same boot: flip again and reboot",
			start: func() State {
				s, _ := run(t, fresh(), imm, EvOffer{Target: n})
				s.Phase = ota.Staged
				return s
			}(), policy: imm, events: []Event{EvBoot{Booted: "A", BootID: "b1"}}, phase: ota.Rebooting,
			effects: "mark(active,B) persist emit(staged>rebooting) reboot", targetID: "rel-n"},
		{name: "refused offer is an event and last_refusal, and changes nothing else",
			start: fresh(), policy: imm, events: []Event{EvOffer{Target: n}, EvRefused{Outcome: ota.Outcome{Code: "bad_signature", Message: "x"}}}, phase: ota.Downloading,
			targetID: "rel-n", effects: "persist emit(downloading>downloading,rejected,bad_signature)"},
		{name: "manual mark-bad with a good other slot returns to it",
			start: func() State {
				s, _ := run(t, atRebooting(), imm, EvBoot{Booted: "B", BootID: "b2"}, EvHealth{OK: true})
				return s
			}(), policy: imm, events: []Event{EvMarkBad{}}, phase: ota.Idle, result: ota.ResultRolledBack,
			effects: "mark(bad,B) mark(active,A) persist emit(idle>idle,rolled_back,cancelled) reboot"},
		{name: "manual mark-bad under the manual reboot policy marks and leaves the reboot to the operator",
			start: func() State {
				s, _ := run(t, atRebooting(), imm, EvBoot{Booted: "B", BootID: "b2"}, EvHealth{OK: true})
				return s
			}(), policy: manual, events: []Event{EvMarkBad{}}, phase: ota.Idle, result: ota.ResultRolledBack,
			effects: "mark(bad,B) mark(active,A) persist emit(idle>idle,rolled_back,cancelled)",
			checkState: func(t *testing.T, s State) {
				if !strings.Contains(s.LastResult.Message, "reboot to return to slot A") {
					t.Errorf("message %q does not tell the operator to reboot", s.LastResult.Message)
				}
			}},
		{name: "agent restart after a manual mark-bad, same boot: no reboot under the manual policy",
			start: func() State {
				s, _ := run(t, atRebooting(), imm, EvBoot{Booted: "B", BootID: "b2"}, EvHealth{OK: true})
				s, _ = run(t, s, manual, EvMarkBad{})
				return s
			}(), policy: manual, events: []Event{EvBoot{Booted: "B", BootID: "b2"}}, phase: ota.Idle,
			effects: "persist mark(bad,B) persist emit(idle>idle)"},
		{name: "mark-bad while confirming under the manual policy fails the install without rebooting",
			start: atRebooting(), policy: manual, events: []Event{EvBoot{Booted: "B", BootID: "b2"}, EvMarkBad{}},
			phase: ota.Idle, result: ota.ResultFailed, code: ota.CodeCancelled,
			effects: "persist emit(confirming>idle,failed,cancelled) mark(bad,B)"},
		{name: "a rejection journaled whose mark bad failed: reboot, the bootloader decides",
			start: atRebooting(), policy: manual, events: []Event{EvBoot{Booted: "B", BootID: "b2"}, EvHealth{OK: false},
				EvEffectFailed{Effect: Mark{Op: MarkBad, Slot: "B"}, Message: "env"}},
			phase: ota.Idle, result: ota.ResultFailed, code: ota.CodeHealthCheckFailed, effects: "persist emit(idle>idle) reboot"},
		{name: "manual mark-bad with nothing to return to is refused",
			start: fresh(), policy: imm, events: []Event{EvMarkBad{}}, phase: ota.Idle, effects: "persist emit(idle>idle)"},
		{name: "manual mark-good while confirming commits",
			start: atRebooting(), policy: imm, events: []Event{EvBoot{Booted: "B", BootID: "b2"}, EvMarkGood{}}, phase: ota.Idle, result: ota.ResultSuccess},
		{name: "bootloader failure while marking bad fails the install",
			start: fresh(), policy: imm, events: []Event{EvOffer{Target: n}, EvEffectFailed{Effect: Mark{Op: MarkBad, Slot: "B"}, Message: "env"}},
			phase: ota.Idle, result: ota.ResultFailed, code: ota.CodeWriteFailed, effects: "cancel persist emit(downloading>idle,failed,write_failed)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, effects := run(t, tc.start, tc.policy, tc.events...)
			if s.Phase != tc.phase {
				t.Errorf("phase = %s, want %s", s.Phase, tc.phase)
			}
			if tc.result != "" && (s.LastResult == nil || s.LastResult.Result != tc.result) {
				t.Errorf("last result = %+v, want %s", s.LastResult, tc.result)
			}
			if tc.code != "" && (s.LastResult == nil || s.LastResult.Code != tc.code) {
				t.Errorf("last code = %+v, want %s", s.LastResult, tc.code)
			}
			if effects == "" {
				effects = "none"
			}
			if tc.effects != "" && effects != tc.effects {
				t.Errorf("effects\n got: %s\nwant: %s", effects, tc.effects)
			}
			gotT := ""
			if s.Target != nil {
				gotT = s.Target.ID
			}
			if gotT != tc.targetID {
				t.Errorf("target = %q, want %q", gotT, tc.targetID)
			}
			gotP := ""
			if s.Pending != nil {
				gotP = s.Pending.ID
			}
			if gotP != tc.pendingID {
				t.Errorf("pending = %q, want %q", gotP, tc.pendingID)
			}
			if tc.checkState != nil {
				tc.checkState(t, s)
			}
		})
	}
}

// Every emitted record grows seq and is preceded by a journal write holding it.
func TestSeqJournaledBeforePublish(t *testing.T) {
	s := fresh()
	p := Policy{RebootImmediately: true, MaxRestarts: 2}
	var persistedSeq, lastSeq uint64
	evs := []Event{EvOffer{Target: tgt("n", 1)}, EvProgress{Gen: 1, Progress: ota.Progress{Phase: ota.Verifying}}, done(1, ""), EvBoot{Booted: "B", BootID: "b2"}, EvHealth{OK: true}}
	for _, ev := range evs {
		var effects []Effect
		s, effects = Step(s, p, time.Time{}, ev)
		for _, e := range effects {
			switch e := e.(type) {
			case Persist:
				persistedSeq = e.State.Seq
			case Emit:
				if e.Event.Seq <= lastSeq {
					t.Fatalf("seq %d after %d", e.Event.Seq, lastSeq)
				}
				if persistedSeq < e.Event.Seq {
					t.Fatalf("seq %d published before journaled (journal has %d)", e.Event.Seq, persistedSeq)
				}
				lastSeq = e.Event.Seq
			}
		}
	}
}

// Step must not change its input state (it is a value the loop may keep).
func TestStepDoesNotMutateInput(t *testing.T) {
	s := fresh()
	before := fmt.Sprintf("%+v", s.Slots)
	Step(s, Policy{}, time.Time{}, EvOffer{Target: tgt("n", 1)})
	if after := fmt.Sprintf("%+v", s.Slots); after != before {
		t.Fatalf("input slots changed: %s -> %s", before, after)
	}
}

// An ending keeps the time of the step that ended it, in the journal's
// ended list and the last result; a redelivery later changes neither (the
// time is shown, never decided by).
func TestEndingKeepsItsTime(t *testing.T) {
	t1, t2 := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC), time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)
	s, _ := Step(fresh(), Policy{}, t1, EvOffer{Target: tgt("n", 1)})
	s, _ = Step(s, Policy{}, t1, done(1, ota.CodeHashMismatch))
	if len(s.Ended) != 1 || !s.Ended[0].Time.Equal(t1) || s.LastResult == nil || !s.LastResult.Time.Equal(t1) {
		t.Fatalf("ended %+v, last result %+v: want both at %s", s.Ended, s.LastResult, t1)
	}
	s, _ = Step(s, Policy{}, t2, EvOffer{Target: tgt("n", 1)})
	if len(s.Ended) != 1 || !s.Ended[0].Time.Equal(t1) || !s.LastResult.Time.Equal(t1) {
		t.Fatalf("redelivery at %s: ended %+v, last result %+v", t2, s.Ended, s.LastResult)
	}
}
