package uboot

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"testing"

	"github.com/otad/otad/bootctl"
	"github.com/otad/otad/internal/testkit/powercut"
	"github.com/otad/otad/ota"
)

// tearLengths are the prefix lengths of a copy that reach the disk before the cut.
func tearLengths(size int) []int {
	// Every byte of the header and the variables (they end before byte 80 here),
	// then a few points in the padding.
	var n []int
	for i := 0; i <= 80; i++ {
		n = append(n, i)
	}
	return append(n, 512, 4096, size-1)
}

// ubootBoot models U-Boot running boot.cmd: pick a slot and saveenv (U-Boot's own
// redundant write is not ours to tear).
func ubootBoot(t *testing.T, e *Env) ota.Slot {
	t.Helper()
	var slot ota.Slot
	err := e.Update(context.Background(), func(v map[string]string) error {
		s, nv := Pick(v, e.attempts)
		slot = s
		maps.Copy(v, nv)
		return nil
	})
	if err != nil {
		t.Fatalf("boot: %v", err)
	}
	return slot
}

type step struct {
	name     string
	mark     string // bad | active | good | boot
	slot     ota.Slot
	verified []ota.Slot // slots holding a verified image while this step runs
	after    ota.Slot   // the slot the next boot must pick once the step completed
}

// The agent's env writes for an install of B on a device running A (docs/contract/installing.md), then
// the commit; and the same with a rollback instead.
var scenarios = map[string][]step{
	"commit": {
		{"mark inactive bad", "bad", "B", []ota.Slot{"A"}, "A"},
		{"mark active", "active", "B", []ota.Slot{"A", "B"}, "B"},
		{"boot new", "boot", "", nil, ""},
		{"mark good", "good", "B", []ota.Slot{"A", "B"}, "B"},
	},
	"rollback": {
		{"mark inactive bad", "bad", "B", []ota.Slot{"A"}, "A"},
		{"mark active", "active", "B", []ota.Slot{"A", "B"}, "B"},
		{"boot new", "boot", "", nil, ""},
		{"health failed: mark new bad", "bad", "B", []ota.Slot{"A", "B"}, "A"},
	},
}

func doMark(ctx context.Context, e *Env, s step) error {
	switch s.mark {
	case "bad":
		return e.MarkBad(ctx, s.slot)
	case "active":
		return e.MarkActive(ctx, s.slot)
	case "good":
		return e.MarkGood(ctx, s.slot)
	}
	return fmt.Errorf("unknown mark %q", s.mark)
}

// TestPowerCutAtEveryWrite cuts the power in the middle of each of the agent's env
// writes (a prefix of the copy being written reaches the disk), then boots: the
// slot chosen must hold a verified image. With a redundant env this always holds;
// a single copy cannot be torn safely (U-Boot then falls back to its built-in
// default env), so there the test checks that a torn env is reported as
// ErrBadEnv and never read as something else.
func TestPowerCutAtEveryWrite(t *testing.T) {
	initial := map[string]string{"BOOT_ORDER": "A B", "BOOT_A_LEFT": "3", "BOOT_B_LEFT": "3", "bootcmd": "run x"}
	if n := len(mustEncodeVars(t, initial)); n > 80 {
		t.Fatalf("the variables take %d bytes; widen tearLengths", n)
	}
	for _, l := range layouts {
		for scName, sc := range scenarios {
			for cut := range sc {
				if sc[cut].mark == "boot" {
					continue
				}
				// Bring a device to the state just before the cut once, then restore
				// its files for every tear length.
				ctx := context.Background()
				cfg, copies := setup(t, l, initial)
				e := testOpen(t, cfg).WithLockFile("")
				e.disk.Sync = powercut.NoSync
				for _, s := range sc[:cut] {
					if s.mark == "boot" {
						if got := ubootBoot(t, e); got != "B" {
							t.Fatalf("%s/%s: boot after mark active picked %q", l.name, scName, got)
						}
						continue
					}
					if err := doMark(ctx, e, s); err != nil {
						t.Fatalf("%s/%s: %s: %v", l.name, scName, s.name, err)
					}
				}
				saved := map[string][]byte{}
				for _, c := range copies {
					b, err := os.ReadFile(c[0])
					if err != nil {
						t.Fatal(err)
					}
					saved[c[0]] = b
				}
				for _, n := range tearLengths(envSize) {
					name := fmt.Sprintf("%s/%s/%s/%d", l.name, scName, sc[cut].name, n)
					for p, b := range saved {
						powercut.Restore(t, p, b)
					}
					before, err := e.Load(ctx)
					if err != nil {
						t.Fatal(err)
					}
					e.disk = powercut.Torn(n)
					if err := doMark(ctx, e, sc[cut]); !errors.Is(err, powercut.ErrPowerCut) {
						t.Fatalf("%s: write was not cut: %v", name, err)
					}
					// Power back on: a fresh reader, as U-Boot and then otad would have.
					e2 := testOpen(t, cfg).WithLockFile("")
					e2.disk.Sync = powercut.NoSync
					snap, err := e2.Load(ctx)
					if !l.redundant {
						if err != nil {
							if !errors.Is(err, bootctl.ErrBadEnv) {
								t.Fatalf("%s: torn single env: %v", name, err)
							}
							continue
						}
						if !maps.Equal(snap.Vars, before.Vars) {
							want := maps.Clone(before.Vars)
							_ = applyMark(want, sc[cut], 3)
							if !maps.Equal(snap.Vars, want) {
								t.Fatalf("%s: torn single env read as %v", name, snap.Vars)
							}
						}
						continue
					}
					if err != nil {
						t.Fatalf("%s: redundant env unreadable after a torn write: %v", name, err)
					}
					slot, _ := Pick(snap.Vars, 3)
					if !slices.Contains(sc[cut].verified, slot) {
						t.Fatalf("%s: boot would pick %q, verified are %v (env %v)", name, slot, sc[cut].verified, snap.Vars)
					}
					// The agent retries the mark after the reboot: then it holds.
					e2.disk.WriteAt = (*os.File).WriteAt
					if err := doMark(ctx, e2, sc[cut]); err != nil {
						t.Fatalf("%s: retry: %v", name, err)
					}
					snap, err = e2.Load(ctx)
					if err != nil {
						t.Fatal(err)
					}
					if slot, _ := Pick(snap.Vars, 3); slot != sc[cut].after {
						t.Fatalf("%s: after the retried mark boot picks %q, want %q", name, slot, sc[cut].after)
					}
				}
			}
		}
	}
}

func applyMark(v map[string]string, s step, attempts int) error {
	switch s.mark {
	case "bad":
		return SetBad(v, s.slot)
	case "active":
		return SetActive(v, s.slot, attempts)
	case "good":
		return SetGood(v, s.slot, attempts)
	}
	return nil
}

// A slot written while the power failed stays unbootable: the install's mark bad
// completed, the slot write did not, so no later boot picks it.
func TestPowerCutDuringSlotWrite(t *testing.T) {
	forEachLayout(t, map[string]string{"BOOT_ORDER": "B A", "BOOT_A_LEFT": "3", "BOOT_B_LEFT": "3"}, func(t *testing.T, _ string, e *Env) {
		ctx := t.Context()
		// Running B, installing A.
		if err := e.MarkBad(ctx, "A"); err != nil {
			t.Fatal(err)
		}
		for boot := 0; boot < 10; boot++ {
			if got := ubootBoot(t, e); got != "B" {
				t.Fatalf("boot %d picked %q", boot, got)
			}
			if err := e.MarkGood(ctx, "B"); err != nil { // healthy boot of B
				t.Fatal(err)
			}
		}
	})
}

func mustEncodeVars(t *testing.T, v map[string]string) []byte {
	t.Helper()
	b, err := EncodeEnv(v, envSize, true, 0)
	if err != nil {
		t.Fatal(err)
	}
	end := 5
	for b[end] != 0 || b[end+1] != 0 {
		end++
	}
	return b[:end+2]
}
