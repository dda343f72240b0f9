package agent

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otad/otad/ota"
)

// revokingChecker is jsonChecker whose keys can be revoked: CheckTrust
// refuses every envelope once revoked is set.
type revokingChecker struct {
	jsonChecker
	revoked atomic.Bool
	checked atomic.Int32
}

func (c *revokingChecker) CheckTrust(raw []byte) error {
	c.checked.Add(1)
	if c.revoked.Load() {
		return ota.Errorf(ota.CodeBadSignature, "key 1234 was revoked by root version 2")
	}
	return nil
}

// revokeDuring revokes the keys while the image downloads.
type revokeDuring struct {
	fakeInstaller
	c *revokingChecker
}

func (r *revokeDuring) Install(ctx context.Context, job InstallJob, progress func(ota.Progress)) error {
	r.c.revoked.Store(true)
	return r.fakeInstaller.Install(ctx, job, progress)
}

// TestFlipChecksTrustAgain: a key revoked while its image downloaded never
// gets the image booted: the install fails bad_signature before the boot
// slot changes, and the slot stays marked bad.
func TestFlipChecksTrustAgain(t *testing.T) {
	for _, revoke := range []bool{false, true} {
		t.Run(map[bool]string{false: "trusted", true: "revoked during the download"}[revoke], func(t *testing.T) {
			c := &revokingChecker{}
			var inst Installer = &fakeInstaller{delay: time.Millisecond}
			if revoke {
				inst = &revokeDuring{fakeInstaller: fakeInstaller{delay: time.Millisecond}, c: c}
			}
			boot := &fakeBoot{}
			a, err := New(Config{DeviceID: "dev-1", Policy: Policy{MaxRestarts: 2}, Logger: slog.New(slog.DiscardHandler)}, Deps{
				Store: &memStore{}, Bootloader: boot, Installer: inst, Checker: c, Rebooter: &fakeReboot{}, Health: okHealth{},
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- a.Run(ctx, "A", "boot-1") }()
			o, err := a.Install(ctx, offerJSON(tgt("n", 1)))
			if err != nil {
				t.Fatal(err)
			}
			cancel()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Fatal(err)
			}
			if c.checked.Load() != 1 {
				t.Errorf("trust checked %d times before the flip, want 1", c.checked.Load())
			}
			boot.mu.Lock()
			flipped := slices.Contains(boot.ops, "active B")
			boot.mu.Unlock()
			if !revoke {
				if o.Result != ota.ResultStaged || !flipped {
					t.Fatalf("outcome %+v, flipped %v: want staged and flipped", o, flipped)
				}
				return
			}
			if o.Result != ota.ResultFailed || o.Code != ota.CodeBadSignature || flipped {
				t.Fatalf("outcome %+v, flipped %v: want failed bad_signature, not flipped", o, flipped)
			}
			if st := a.Status(); st.Slots["B"].Status != ota.SlotBad || st.State != ota.Idle {
				t.Errorf("status %s, slot B %+v: want idle, B bad", st.State, st.Slots["B"])
			}
		})
	}
}

// TestMarkActiveOtherChecksTrustAgain: an image staged, then dropped with
// mark-active booted, is not made primary by mark-active other once the
// key that signed its offer is revoked (docs/contract/trust.md rule 6):
// the command is refused naming the revocation and the boot slot stays.
func TestMarkActiveOtherChecksTrustAgain(t *testing.T) {
	for _, revoke := range []bool{false, true} {
		t.Run(map[bool]string{false: "trusted", true: "revoked after the drop"}[revoke], func(t *testing.T) {
			c := &revokingChecker{}
			boot := &fakeBoot{}
			a, err := New(Config{DeviceID: "dev-1", Policy: Policy{MaxRestarts: 2}, Logger: slog.New(slog.DiscardHandler)}, Deps{
				Store: &memStore{}, Bootloader: boot, Installer: &fakeInstaller{delay: time.Millisecond}, Checker: c, Rebooter: &fakeReboot{}, Health: okHealth{},
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- a.Run(ctx, "A", "boot-1") }()
			if o, err := a.Install(ctx, offerJSON(tgt("n", 1))); err != nil || o.Result != ota.ResultStaged {
				t.Fatalf("install: %+v %v", o, err)
			}
			if err := a.MarkActive(ctx, false); err != nil {
				t.Fatalf("mark-active booted: %v", err)
			}
			c.revoked.Store(revoke)
			err = a.MarkActive(ctx, true)
			st := a.Status()
			cancel()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Fatal(err)
			}
			boot.mu.Lock()
			flips := 0
			for _, op := range boot.ops {
				if op == "active B" {
					flips++
				}
			}
			boot.mu.Unlock()
			if !revoke {
				if err != nil || flips != 2 {
					t.Fatalf("mark-active other: %v, %d flips to B: want it made primary again", err, flips)
				}
				return
			}
			if err == nil || ota.CodeOf(err) != ota.CodeBadSignature || !strings.Contains(err.Error(), "revoked by root version 2") {
				t.Fatalf("mark-active other: %v, want refused bad_signature naming the revocation", err)
			}
			if flips != 1 || st.State != ota.Idle || st.Slots["B"].Status != ota.SlotStaged {
				t.Errorf("%d flips to B, state %s, slot B %+v: want B never primary again, idle, B's image kept", flips, st.State, st.Slots["B"])
			}
		})
	}
}
