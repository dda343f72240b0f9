package agent

import (
	"strings"
	"testing"

	"github.com/otad/otad/ota"
)

// ended is the latest ending recorded for t.
func endedOf(t *testing.T, s State, tg Target) Ended {
	t.Helper()
	e, ok := s.ended(&tg)
	if !ok {
		t.Fatalf("no ending recorded for %s", tg.ID)
	}
	return e
}

func TestRetryCancelUndo(t *testing.T) {
	imm := Policy{RebootImmediately: true, MaxRestarts: 2, RetryAttempts: 2}
	manual := Policy{MaxRestarts: 2, RetryAttempts: 2}
	n, m := tgt("n", 1), tgt("m", 2)
	retryOf := func(x Target, try int) Event { x.Try = try; return EvRetry{Target: x} }
	withRetry := func(x Target, counter int64) Target { x.Retry = counter; return x }
	given := n
	given.PayloadGiven = true
	staged := func(p Policy) State { s, _ := run(t, fresh(), p, EvOffer{Target: n}, done(1, "")); return s }
	// dropping is a staged install whose drop the journal holds, the power cut after.
	dropping := func(p Policy, how string) State { s := staged(p); s.Target.Drop = how; return s }
	// slot B holds a verified image the device once ran (a good one).
	withB := func(st ota.SlotState, sv uint64) State {
		s := fresh()
		s.Slots["B"] = SlotInfo{ID: "rel-b", Version: "b", SHA256: strings.Repeat("b", 64), SecurityVersion: sv, Status: st}
		return s
	}
	tests := []struct {
		name      string
		start     State
		policy    Policy
		events    []Event
		phase     ota.Phase
		result    ota.Result
		code      ota.Code
		retryable bool
		effects   string
		targetID  string
		check     func(t *testing.T, s State)
	}{
		{name: "a failed download is retryable and the agent retries it later",
			start: fresh(), policy: imm, events: []Event{EvOffer{Target: n}, done(1, ota.CodeDownloadFailed)},
			phase: ota.Idle, result: ota.ResultFailed, code: ota.CodeDownloadFailed, retryable: true,
			effects: "persist emit(downloading>idle,failed,download_failed) retry(rel-n,1)"},
		{name: "the retry's timer starts the install again",
			start: fresh(), policy: imm, events: []Event{EvOffer{Target: n}, done(1, ota.CodeDownloadFailed), retryOf(n, 1)},
			phase: ota.Downloading, targetID: "rel-n", result: ota.ResultFailed, code: ota.CodeDownloadFailed, retryable: true,
			effects: "persist emit(idle>downloading) mark(bad,B) install(rel-n>B)"},
		{name: "retries are bounded by [retry] attempts",
			start: fresh(), policy: imm, events: []Event{EvOffer{Target: n}, done(1, ota.CodeDownloadFailed), retryOf(n, 1),
				done(2, ota.CodeDownloadFailed), retryOf(n, 2), done(3, ota.CodeDownloadFailed)},
			phase: ota.Idle, result: ota.ResultFailed, code: ota.CodeDownloadFailed, retryable: true,
			effects: "persist emit(downloading>idle,failed,download_failed)",
			check: func(t *testing.T, s State) {
				if e := endedOf(t, s, n); e.Try != 2 {
					t.Errorf("last try = %d, want 2", e.Try)
				}
			}},
		{name: "a late timer past the bound starts nothing",
			start: fresh(), policy: imm, events: []Event{EvOffer{Target: n}, done(1, ota.CodeDownloadFailed), retryOf(n, 2)},
			phase: ota.Idle, effects: "none"},
		{name: "a timer after a newer offer took over starts nothing",
			start: fresh(), policy: imm, events: []Event{EvOffer{Target: n}, done(1, ota.CodeDownloadFailed), EvOffer{Target: m}, retryOf(n, 1)},
			phase: ota.Downloading, targetID: "rel-m", effects: "none"},
		{name: "a redelivery of a failed download restarts nothing",
			start: fresh(), policy: Policy{RebootImmediately: true}, events: []Event{EvOffer{Target: n}, done(1, ota.CodeDownloadFailed), EvOffer{Target: n}},
			phase: ota.Idle, result: ota.ResultFailed, code: ota.CodeDownloadFailed, retryable: true, effects: "persist emit(idle>idle)"},
		{name: "otad install of the same offer reopens a failed download",
			start: fresh(), policy: Policy{RebootImmediately: true}, events: []Event{EvOffer{Target: n}, done(1, ota.CodeDownloadFailed), EvOffer{Target: n, Local: true}},
			phase: ota.Downloading, targetID: "rel-n", effects: "persist emit(idle>downloading) mark(bad,B) install(rel-n>B)"},
		{name: "publish --retry: a greater attempt counter reopens download_failed",
			start: fresh(), policy: Policy{RebootImmediately: true}, events: []Event{EvOffer{Target: n}, done(1, ota.CodeDownloadFailed), EvOffer{Target: withRetry(n, 5)}},
			phase: ota.Downloading, targetID: "rel-n", effects: "persist emit(idle>downloading) mark(bad,B) install(rel-n>B)"},
		{name: "publish --retry replayed (the same counter) restarts nothing",
			start: fresh(), policy: Policy{RebootImmediately: true}, events: []Event{EvOffer{Target: withRetry(n, 5)}, done(1, ota.CodeDownloadFailed), EvOffer{Target: withRetry(n, 5)}},
			phase: ota.Idle, retryable: true, result: ota.ResultFailed, code: ota.CodeDownloadFailed, effects: "persist emit(idle>idle)"},
		{name: "publish --retry is refused for health_check_failed",
			start: staged(imm), policy: imm, events: []Event{EvBoot{Booted: "B", BootID: "b2"}, EvHealth{OK: false}, EvBoot{Booted: "A", BootID: "b3"}, EvOffer{Target: withRetry(n, 9)}},
			phase: ota.Idle, result: ota.ResultFailed, code: ota.CodeHealthCheckFailed, effects: "persist emit(idle>idle)"},
		{name: "otad install does not reopen a final ending (hash_mismatch of the signed download)",
			start: fresh(), policy: imm, events: []Event{EvOffer{Target: n}, done(1, ota.CodeHashMismatch), EvOffer{Target: n, Local: true}},
			phase: ota.Idle, code: ota.CodeHashMismatch, result: ota.ResultFailed, effects: "persist emit(idle>idle)"},
		{name: "a given payload that did not match is retryable, never retried unasked",
			start: fresh(), policy: imm, events: []Event{EvOffer{Target: given, Local: true}, done(1, ota.CodeSizeMismatch)},
			phase: ota.Idle, result: ota.ResultFailed, code: ota.CodeSizeMismatch, retryable: true,
			effects: "persist emit(downloading>idle,failed,size_mismatch)"},
		{name: "a corrected --payload installs the offer again",
			start: fresh(), policy: imm, events: []Event{EvOffer{Target: given, Local: true}, done(1, ota.CodeSizeMismatch), EvOffer{Target: given, Local: true}},
			phase: ota.Downloading, targetID: "rel-n", effects: "persist emit(idle>downloading) mark(bad,B) install(rel-n>B)"},
		{name: "cancel stops the download: slot left bad, boot env untouched, retryable",
			start: fresh(), policy: imm, events: []Event{EvOffer{Target: n}, EvCancel{}},
			phase: ota.Idle, result: ota.ResultFailed, code: ota.CodeCancelled, retryable: true,
			effects: "cancel persist emit(downloading>idle,failed,cancelled)"},
		{name: "after cancel the same envelope installs",
			start: fresh(), policy: imm, events: []Event{EvOffer{Target: n}, EvCancel{}, EvOffer{Target: n, Local: true}},
			phase: ota.Downloading, targetID: "rel-n", effects: "persist emit(idle>downloading) mark(bad,B) install(rel-n>B)"},
		{name: "a late completion of the cancelled writer is ignored",
			start: fresh(), policy: imm, events: []Event{EvOffer{Target: n}, EvCancel{}, done(1, "")},
			phase: ota.Idle, code: ota.CodeCancelled, result: ota.ResultFailed, retryable: true, effects: "none"},
		{name: "cancel with nothing running is refused and changes nothing",
			start: fresh(), policy: imm, events: []Event{EvCancel{}}, phase: ota.Idle, effects: "persist emit(idle>idle)"},
		{name: "mark-active booted drops a staged install (manual)",
			start: staged(manual), policy: manual, events: []Event{EvMarkActive{}},
			phase: ota.Idle, result: ota.ResultFailed, code: ota.CodeCancelled, retryable: true,
			effects: "persist mark(active,A) persist emit(rebooting>idle,failed,cancelled)",
			check: func(t *testing.T, s State) {
				if s.Slots["B"].Status != ota.SlotStaged {
					t.Errorf("slot B = %+v, want its verified image kept", s.Slots["B"])
				}
			}},
		{name: "after mark-active booted the next offer installs",
			start: staged(manual), policy: manual, events: []Event{EvMarkActive{}, EvOffer{Target: m}},
			phase: ota.Downloading, targetID: "rel-m", effects: "mark(bad,B) persist emit(idle>downloading) install(rel-m>B)"},
		{name: "mark-active booted starts the pending offer",
			start: staged(manual), policy: manual, events: []Event{EvOffer{Target: m}, EvMarkActive{}},
			phase: ota.Downloading, targetID: "rel-m", effects: "persist mark(active,A) persist emit(rebooting>idle,failed,cancelled) mark(bad,B) persist emit(idle>downloading) install(rel-m>B)",
			check: func(t *testing.T, s State) {
				// Issue 27: the ending must not promise slot B keeps the image the pending offer overwrites.
				if r := s.LastResult; r == nil || r.ID != "rel-n" || strings.Contains(r.Message, "keeps the verified image") || !strings.Contains(r.Message, "pending rel-m") {
					t.Errorf("ending of the dropped install: %+v", r)
				}
			}},
		{name: "a drop cut by a power cut is finished on the old slot",
			start: dropping(manual, "mark-active"), policy: manual, events: []Event{EvBoot{Booted: "A", BootID: "b2"}},
			phase: ota.Idle, result: ota.ResultFailed, code: ota.CodeCancelled, retryable: true,
			effects: "persist mark(good,A) mark(active,A) persist emit(rebooting>idle,failed,cancelled)"},
		{name: "a drop cut before the bootloader heard it: the dropped slot is left at once",
			start: dropping(manual, "mark-active"), policy: manual, events: []Event{EvBoot{Booted: "B", BootID: "b2"}},
			phase: ota.Idle, result: ota.ResultFailed, code: ota.CodeCancelled,
			effects: "mark(active,A) mark(bad,B) persist emit(rebooting>idle,failed,cancelled) reboot",
			check: func(t *testing.T, s State) {
				if s.Slots["B"].Status != ota.SlotBad {
					t.Errorf("slot B = %+v: a dropped slot that came up must not stay bootable", s.Slots["B"])
				}
			}},
		{name: "mark-active booted with nothing staged is refused",
			start: fresh(), policy: manual, events: []Event{EvMarkActive{}}, phase: ota.Idle, effects: "persist emit(idle>idle)"},
		{name: "mark-active booted mid-download is refused",
			start: fresh(), policy: manual, events: []Event{EvOffer{Target: n}, EvMarkActive{}}, phase: ota.Downloading, targetID: "rel-n", effects: "persist emit(downloading>downloading)"},
		{name: "mark-active other switches to the other slot's verified image",
			start: withB(ota.SlotGood, 0), policy: manual, events: []Event{EvMarkActive{Other: true}},
			phase: ota.Rebooting, targetID: "rel-b", effects: "mark(active,B) persist emit(idle>rebooting)"},
		{name: "mark-active other then boots and commits it after its health check",
			start: withB(ota.SlotGood, 0), policy: imm, events: []Event{EvMarkActive{Other: true}, EvBoot{Booted: "B", BootID: "b2"}, EvHealth{OK: true}},
			phase: ota.Idle, result: ota.ResultSuccess, effects: "mark(good,B) persist emit(confirming>idle,success)"},
		{name: "mark-active other refuses an empty slot",
			start: fresh(), policy: manual, events: []Event{EvMarkActive{Other: true}}, phase: ota.Idle, effects: "persist emit(idle>idle)"},
		{name: "mark-active other refuses a bad slot",
			start: withB(ota.SlotBad, 0), policy: manual, events: []Event{EvMarkActive{Other: true}}, phase: ota.Idle, effects: "persist emit(idle>idle)"},
		{name: "mark-active other refuses an image below the security floor",
			start: func() State { s := withB(ota.SlotGood, 0); s.SecurityFloor = 1; return s }(), policy: manual,
			events: []Event{EvMarkActive{Other: true}}, phase: ota.Idle, effects: "persist emit(idle>idle)"},
		{name: "mark-bad while staged under the manual policy drops it and marks it bad",
			start: staged(manual), policy: manual, events: []Event{EvMarkBad{}},
			phase: ota.Idle, result: ota.ResultFailed, code: ota.CodeCancelled,
			effects: "persist mark(active,A) mark(bad,B) persist emit(rebooting>idle,failed,cancelled)",
			check: func(t *testing.T, s State) {
				if s.Slots["B"].Status != ota.SlotBad {
					t.Errorf("slot B = %+v, want bad", s.Slots["B"])
				}
			}},
		{name: "mark-bad while rebooting under the immediate policy is refused",
			start: staged(imm), policy: imm, events: []Event{EvMarkBad{}}, phase: ota.Rebooting, targetID: "rel-n", effects: "persist emit(rebooting>rebooting)"},
		{name: "an accepted offer clears the last refusal",
			start: fresh(), policy: imm, events: []Event{EvRefused{Outcome: ota.Outcome{ID: "x", Code: ota.CodeExpired}}, EvOffer{Target: n}},
			phase: ota.Downloading, targetID: "rel-n",
			check: func(t *testing.T, s State) {
				if s.LastRefusal != nil {
					t.Errorf("last refusal %+v stays after an accepted offer", s.LastRefusal)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, got := run(t, tc.start, tc.policy, tc.events...)
			if got == "" {
				got = "none"
			}
			if s.Phase != tc.phase {
				t.Errorf("phase %s, want %s", s.Phase, tc.phase)
			}
			if tc.effects != "" && got != tc.effects {
				t.Errorf("effects\n got  %s\n want %s", got, tc.effects)
			}
			id := ""
			if s.Target != nil {
				id = s.Target.ID
			}
			if id != tc.targetID {
				t.Errorf("target %q, want %q", id, tc.targetID)
			}
			if tc.result != "" || tc.code != "" {
				r := s.LastResult
				if r == nil || (tc.result != "" && r.Result != tc.result) || r.Code != tc.code || r.Retryable != tc.retryable {
					t.Errorf("last result %+v, want %s %s retryable=%v", r, tc.result, tc.code, tc.retryable)
				}
			}
			if tc.check != nil {
				tc.check(t, s)
			}
		})
	}
}

// Issue 27: mark-active other under a staged install names the state the
// operator reads (staged, never rebooting under the manual policy) and what
// moves it; nothing settles by itself there.
func TestCanMarkActiveOtherSays(t *testing.T) {
	imm := Policy{RebootImmediately: true, MaxRestarts: 2}
	manual := Policy{MaxRestarts: 2}
	staged := func(p Policy) State { s, _ := run(t, fresh(), p, EvOffer{Target: tgt("n", 1)}, done(1, "")); return s }
	downloading, _ := run(t, fresh(), manual, EvOffer{Target: tgt("n", 1)})
	tests := []struct {
		name  string
		s     State
		p     Policy
		want  []string
		never string
	}{
		{name: "staged under the manual policy", s: staged(manual), p: manual,
			want: []string{"rel-n is staged in slot B", "reboot", "otad mark-active booted"}, never: "settle"},
		{name: "rebooting under the immediate policy", s: staged(imm), p: imm, want: []string{"an install is rebooting; wait for it to settle"}},
		{name: "downloading", s: downloading, p: manual, want: []string{"an install is downloading"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := CanMarkActive(tc.s, tc.p, true)
			if err == nil {
				t.Fatal("not refused")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q lacks %q", err, w)
				}
			}
			if tc.never != "" && strings.Contains(err.Error(), tc.never) {
				t.Errorf("%q says %q", err, tc.never)
			}
		})
	}
}
