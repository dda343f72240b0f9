package crashstate

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/otad/otad/bootctl"
	"github.com/otad/otad/device/node"
	"github.com/otad/otad/durable"
)

// tmp is a directory for the rigs: a tmpfs where there is one.
func tmp(t *testing.T) string {
	t.Helper()
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		d, err := os.MkdirTemp("/dev/shm", "crashstate-")
		if err == nil {
			t.Cleanup(func() { os.RemoveAll(d) })
			return d
		}
	}
	return t.TempDir()
}

func fixture(t *testing.T) *Fixture {
	t.Helper()
	fx, err := NewFixture()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fx.Close)
	return fx
}

// Short is the sample make test explores: seeded, ShortSample states a
// scenario, a second power cut during the recovery from the first.
const ShortSample = 500

func shortOptions(t *testing.T, scenarios []Scenario) Options {
	return Options{Scenarios: scenarios, Model: ShortModel(), Depth: 2, Sample: ShortSample, Workers: 2, Dir: tmp(t),
		Log: func(s string) { t.Log(s) }}
}

// Issue 21: every state of the sample survives, in every scenario.
func TestCrashStates(t *testing.T) {
	res, err := Explore(context.Background(), fixture(t), shortOptions(t, Scenarios(Modes()...)))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range res.Scenarios {
		if s.States < ShortSample {
			t.Errorf("%s: %d states explored, want at least %d", s.Scenario, s.States, ShortSample)
		}
		for i, v := range s.Violations {
			if i < 3 {
				t.Errorf("%s: depth %d: %s (before %s): %v", s.Scenario, v.Depth, v.State, v.Op, v.Messages)
			}
		}
	}
	t.Log(res.Summary(), res.Wall)
}

// Issue 27: an operator's otad cancel mid-download and otad mark-active
// booted of a staged install, each followed by the same offer installed
// again, survive a power cut at every point (a short sample of the stream
// mode; the explorer runs every mode: make crash).
func TestUndoCrashStates(t *testing.T) {
	var scs []Scenario
	for _, sc := range UndoScenarios(Stream) {
		if sc.Boot != UBootSingle {
			scs = append(scs, sc)
		}
	}
	opt := shortOptions(t, scs)
	opt.Sample = 200
	res, err := Explore(context.Background(), fixture(t), opt)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range res.Scenarios {
		if s.Ends["success"] == 0 {
			t.Errorf("%s: no state ends committed: %v", s.Scenario, s.Ends)
		}
		for i, v := range s.Violations {
			if i < 3 {
				t.Errorf("%s: depth %d: %s (before %s): %v", s.Scenario, v.Depth, v.State, v.Op, v.Messages)
			}
		}
	}
	t.Log(res.Summary(), res.Wall)
}

// Issue 29: a root of trust that an offer brings is kept before the offer
// is taken, and a power cut at any point of it, or of the install after
// it, leaves the kept root old or new and the offer committed.
func TestRootCrashStates(t *testing.T) {
	fx := fixture(t)
	var scs []Scenario
	for _, sc := range RootScenarios() {
		if sc.Boot != UBootSingle {
			scs = append(scs, sc)
		}
	}
	// The root update is in the recorded trace: its states are explored.
	r, err := shortOptions(t, nil).rig(scs[0], fx, "trace")
	if err != nil {
		t.Fatal(err)
	}
	_, ops, err := record(context.Background(), r, fx.offer(scs[0]))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(ops, func(op Op) bool { return op.Kind == OpRename && op.To == "state/"+node.RootFile }) {
		t.Fatalf("the update's %d operations do not keep the new root", len(ops))
	}
	opt := shortOptions(t, scs)
	opt.Sample = 200
	res, err := Explore(context.Background(), fx, opt)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range res.Scenarios {
		if s.Ends["success"] == 0 {
			t.Errorf("%s: no state ends committed: %v", s.Scenario, s.Ends)
		}
		for i, v := range s.Violations {
			if i < 3 {
				t.Errorf("%s: depth %d: %s (before %s): %v", s.Scenario, v.Depth, v.State, v.Op, v.Messages)
			}
		}
	}
	t.Log(res.Summary(), res.Wall)
}

// unsyncedRoot is durable without the fsync of the kept root's temporary
// file: its rename may be durable before its bytes.
type unsyncedRoot struct{ durable.FS }

func (u unsyncedRoot) CreateTemp(dir, pattern string) (durable.File, error) {
	f, err := u.FS.CreateTemp(dir, pattern)
	if err != nil || !strings.Contains(pattern, node.RootFile) {
		return f, err
	}
	return noSync{f}, nil
}

type noSync struct{ durable.File }

func (noSync) Sync() error { return nil }

// noDirSync is durable with its directory syncs left out: a rename may be
// lost after the agent acted on it.
type noDirSync struct{ durable.FS }

func (noDirSync) SyncDir(string) error { return nil }

// wrongCopy writes a redundant U-Boot env into the copy in use instead of
// the other: a torn write leaves only the copy from long before.
func wrongCopy(d bootctl.Disk) bootctl.Disk {
	w := d.WriteAt
	d.WriteAt = func(f *os.File, b []byte, off int64) (int, error) { return w(f, b, ubootEnvSize-off) }
	return d
}

// The explorer can fail: a deliberately broken product is caught.
func TestBrokenVariantsAreCaught(t *testing.T) {
	for _, tc := range []struct {
		name string
		sc   Scenario
		opt  func(*Options)
	}{
		{"journal without its directory sync", Scenario{Stream, UBootRedundant, Commit},
			func(o *Options) { o.BrokenFS = func(fs durable.FS) durable.FS { return noDirSync{fs} } }},
		{"redundant env written over the copy in use", Scenario{Stream, UBootRedundant, Commit},
			func(o *Options) { o.BrokenDisk = wrongCopy }},
		{"root of trust kept without its fsync", Scenario{Stream, GRUB, Rotate},
			func(o *Options) { o.BrokenFS = func(fs durable.FS) durable.FS { return unsyncedRoot{fs} } }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opt := shortOptions(t, []Scenario{tc.sc})
			opt.Sample = 200
			tc.opt(&opt)
			res, err := Explore(context.Background(), fixture(t), opt)
			if err != nil {
				t.Fatal(err)
			}
			if res.Violations() == 0 {
				t.Fatalf("%s: %d states, no violation found", tc.name, res.States())
			}
			v := res.Scenarios[0].Violations[0]
			t.Logf("%d of %d states break an invariant, e.g. %s (before %s): %v", res.Violations(), res.States(), v.State, v.Op, v.Messages)
		})
	}
}
