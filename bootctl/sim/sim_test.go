package sim

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/otad/otad/bootctl"
	"github.com/otad/otad/bootctl/uboot"
	"github.com/otad/otad/ota"
)

func openSim(t *testing.T) *Sim {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "boot.json"), 3)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func boot(t *testing.T, s *Sim) ota.Slot {
	t.Helper()
	slot, err := s.Boot()
	must(t, err)
	if b, _ := s.Booted(); b != slot {
		t.Fatalf("Booted() = %q after booting %q", b, slot)
	}
	return slot
}

func TestCreatedOnFirstUse(t *testing.T) {
	s := openSim(t)
	b, err := s.Booted()
	must(t, err)
	id, err := s.BootID()
	must(t, err)
	v, err := s.Vars()
	must(t, err)
	if b != "A" || id != "sim-boot-0" || v["BOOT_ORDER"] != "A B" || v["BOOT_A_LEFT"] != "3" || v["BOOT_B_LEFT"] != "3" {
		t.Fatalf("fresh sim: booted %q id %q vars %v", b, id, v)
	}
	// Reopening keeps the state.
	must(t, s.MarkBad(context.Background(), "B"))
	s2, err := Open(s.Path(), 3)
	must(t, err)
	if v, _ := s2.Vars(); v["BOOT_B_LEFT"] != "0" {
		t.Fatalf("reopened: %v", v)
	}
}

func TestUpdateCycle(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		run  func(t *testing.T, s *Sim)
	}{
		{"mark active then boot picks the new slot, counting down", func(t *testing.T, s *Sim) {
			must(t, s.MarkBad(ctx, "B"))
			must(t, s.MarkActive(ctx, "B"))
			if got := boot(t, s); got != "B" {
				t.Fatalf("booted %q", got)
			}
			st, _ := s.State(ctx)
			if st.Slots["B"].AttemptsLeft != 2 || st.Primary() != "B" || !slices.Equal(st.Order, []ota.Slot{"B", "A"}) {
				t.Fatalf("state %+v", st)
			}
			must(t, s.MarkGood(ctx, "B"))
			for i := 0; i < 5; i++ { // committed: stays on B while it is marked good each boot
				if got := boot(t, s); got != "B" {
					t.Fatalf("boot %d: %q", i, got)
				}
				must(t, s.MarkGood(ctx, "B"))
			}
		}},
		{"never marked good: runs out of attempts, the old slot boots", func(t *testing.T, s *Sim) {
			must(t, s.MarkBad(ctx, "B"))
			must(t, s.MarkActive(ctx, "B"))
			for i := 0; i < 3; i++ {
				if got := boot(t, s); got != "B" {
					t.Fatalf("try %d booted %q", i, got)
				}
			}
			if got := boot(t, s); got != "A" {
				t.Fatalf("after 3 failed tries booted %q", got)
			}
			st, _ := s.State(ctx)
			if st.Slots["B"].Bootable || st.Slots["B"].AttemptsLeft != 0 || st.Slots["A"].AttemptsLeft != 2 {
				t.Fatalf("state %+v", st)
			}
		}},
		{"mark bad: the other boots", func(t *testing.T, s *Sim) {
			must(t, s.MarkActive(ctx, "B"))
			boot(t, s)
			must(t, s.MarkBad(ctx, "B")) // health check failed
			if got := boot(t, s); got != "A" {
				t.Fatalf("booted %q", got)
			}
		}},
		{"a rejected slot stays out after the good slot runs out of attempts", func(t *testing.T, s *Sim) {
			must(t, s.MarkActive(ctx, "B"))
			boot(t, s)
			must(t, s.MarkBad(ctx, "B")) // rejected: out of BOOT_ORDER, as RAUC does
			// A then fails every boot: its attempts run out, the script resets
			// both counters, and boots A again, never the rejected B.
			for i := 0; i < 8; i++ {
				if got := boot(t, s); got != "A" {
					t.Fatalf("boot %d after the rejection: %q", i, got)
				}
			}
			if v, _ := s.Vars(); v["BOOT_ORDER"] != "A" {
				t.Fatalf("vars %v", v)
			}
		}},
		{"half-written slot never boots", func(t *testing.T, s *Sim) {
			must(t, s.MarkBad(ctx, "B"))
			for i := 0; i < 10; i++ {
				if got := boot(t, s); got != "A" {
					t.Fatalf("boot %d: %q", i, got)
				}
				must(t, s.MarkGood(ctx, "A"))
			}
		}},
		{"both exhausted: counters reset, first in order boots", func(t *testing.T, s *Sim) {
			must(t, s.MarkActive(ctx, "B"))
			for i := 0; i < 6; i++ {
				boot(t, s) // nobody marks anything good
			}
			// B 3 tries, A 3 tries, then the reset: B again with 2 left.
			if got := boot(t, s); got != "B" {
				t.Fatalf("after reset booted %q", got)
			}
			if v, _ := s.Vars(); v["BOOT_B_LEFT"] != "2" || v["BOOT_A_LEFT"] != "3" {
				t.Fatalf("vars %v", v)
			}
		}},
	}
	// The same rules whether the state is in a file or in memory.
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, openSim(t)) })
		t.Run(tt.name+" (in memory)", func(t *testing.T) {
			s, err := NewMemory(3)
			must(t, err)
			tt.run(t, s)
		})
	}
}

// An in-memory sim starts as a new file does and keeps nothing shared with
// its callers.
func TestMemoryStartsAsTheFactory(t *testing.T) {
	m, err := NewMemory(3)
	must(t, err)
	f := openSim(t)
	for _, s := range []*Sim{m, f} {
		v, err := s.Vars()
		must(t, err)
		v["BOOT_ORDER"] = "B A" // a copy
	}
	vm, _ := m.Vars()
	vf, _ := f.Vars()
	if !maps.Equal(vm, vf) || vm["BOOT_ORDER"] != "A B" {
		t.Fatalf("memory %v, file %v", vm, vf)
	}
	if _, err := NewMemory(0); err == nil {
		t.Fatal("attempts 0 accepted")
	}
}

func TestBootIDChangesEveryBoot(t *testing.T) {
	s := openSim(t)
	seen := map[string]bool{}
	for i := 0; i < 5; i++ {
		id, err := s.BootID()
		must(t, err)
		if seen[id] {
			t.Fatalf("boot id %q repeated", id)
		}
		seen[id] = true
		boot(t, s)
	}
}

func TestBootMatchesPick(t *testing.T) {
	s := openSim(t)
	ctx := context.Background()
	must(t, s.MarkActive(ctx, "B"))
	for i := 0; i < 8; i++ {
		v, _ := s.Vars()
		want, wantVars := uboot.Pick(v, 3)
		got := boot(t, s)
		after, _ := s.Vars()
		if got != want || after["BOOT_A_LEFT"] != wantVars["BOOT_A_LEFT"] || after["BOOT_B_LEFT"] != wantVars["BOOT_B_LEFT"] {
			t.Fatalf("boot %d: %q %v, uboot.Pick %q %v", i, got, after, want, wantVars)
		}
	}
}

// A power cut before the rename leaves the previous state intact and no temp file.
func TestPowerCutBeforeRename(t *testing.T) {
	ctx := context.Background()
	s := openSim(t)
	cut := errors.New("power cut")
	marks := []func(context.Context, ota.Slot) error{s.MarkBad, s.MarkActive, s.MarkGood}
	wantAfterCut := []ota.Slot{"A", "A", "B"} // the boot sees the state before the mark
	for i, m := range marks {
		before, _ := os.ReadFile(s.Path())
		s.commit = func(string, string) error { return cut }
		if err := m(ctx, "B"); !errors.Is(err, cut) {
			t.Fatalf("mark %d: %v", i, err)
		}
		after, _ := os.ReadFile(s.Path())
		if string(after) != string(before) {
			t.Fatalf("mark %d: state changed by an aborted write", i)
		}
		ents, _ := os.ReadDir(filepath.Dir(s.Path()))
		if len(ents) != 1 {
			t.Fatalf("mark %d: leftover files %v", i, ents)
		}
		if got, err := s.Boot(); !errors.Is(err, cut) || got != "" {
			t.Fatalf("boot under a power cut: %q %v", got, err)
		}
		s.commit = os.Rename
		if got := boot(t, s); got != wantAfterCut[i] {
			t.Fatalf("mark %d: boot picked %q, want %q", i, got, wantAfterCut[i])
		}
		must(t, m(ctx, "B"))
		boot(t, s)
	}
}

func TestErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte("{not json"), 0o644)
	if _, err := Open(bad, 3); !errors.Is(err, bootctl.ErrBadEnv) || !strings.Contains(err.Error(), "bad.json") {
		t.Fatalf("bad json: %v", err)
	}
	slot := filepath.Join(dir, "slot.json")
	os.WriteFile(slot, []byte(`{"vars":{},"booted":"C"}`), 0o644)
	if _, err := Open(slot, 3); !errors.Is(err, bootctl.ErrUnknownSlot) || !strings.Contains(err.Error(), "booted") {
		t.Fatalf("bad slot: %v", err)
	}
	if _, err := Open(filepath.Join(dir, "x.json"), 0); err == nil {
		t.Fatal("attempts 0 accepted")
	}
	s := openSim(t)
	if err := s.MarkGood(context.Background(), "Z"); !errors.Is(err, bootctl.ErrUnknownSlot) {
		t.Fatalf("slot Z: %v", err)
	}
	noslot := filepath.Join(dir, "noslot.json")
	os.WriteFile(noslot, []byte(`{"vars":{"BOOT_ORDER":"C"},"booted":"A"}`), 0o644)
	s2, err := Open(noslot, 3)
	must(t, err)
	if _, err := s2.Boot(); !errors.Is(err, bootctl.ErrBadEnv) {
		t.Fatalf("order without slots: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.MarkBad(ctx, "B"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled ctx: %v", err)
	}
}
