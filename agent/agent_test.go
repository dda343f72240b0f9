package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otad/otad/ota"
)

// Fakes for the loop's edges; the real parts are exercised in device/node.

type memStore struct {
	mu    sync.Mutex
	s     State
	ok    bool
	saves int
}

func (m *memStore) Load() (State, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.ok {
		return State{Phase: ota.Idle, Slots: map[ota.Slot]SlotInfo{}}, false, nil
	}
	return m.s.Clone(), true, nil
}

func (m *memStore) Save(s State) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.s, m.ok = s.Clone(), true
	m.saves++
	return nil
}

type fakeBoot struct {
	mu      sync.Mutex
	ops     []string
	failBad bool
}

func (b *fakeBoot) rec(op string, slot ota.Slot) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ops = append(b.ops, op+" "+string(slot))
	if op == "bad" && b.failBad {
		return errors.New("env device gone")
	}
	return nil
}
func (b *fakeBoot) MarkBad(_ context.Context, s ota.Slot) error    { return b.rec("bad", s) }
func (b *fakeBoot) MarkActive(_ context.Context, s ota.Slot) error { return b.rec("active", s) }
func (b *fakeBoot) MarkGood(_ context.Context, s ota.Slot) error   { return b.rec("good", s) }
func (b *fakeBoot) Order(context.Context) ([]ota.Slot, error)      { return ota.Slots(), nil }

// fakeInstaller "writes" for a while and counts concurrent writers.
type fakeInstaller struct {
	active, maxActive atomic.Int32
	delay             time.Duration
	code              ota.Code
	mu                sync.Mutex
	lastBooted        SlotInfo
}

func (f *fakeInstaller) booted() SlotInfo {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lastBooted
}

func (f *fakeInstaller) Install(ctx context.Context, job InstallJob, progress func(ota.Progress)) error {
	t := job.Target
	f.mu.Lock()
	f.lastBooted = job.Booted
	f.mu.Unlock()
	n := f.active.Add(1)
	defer f.active.Add(-1)
	for {
		m := f.maxActive.Load()
		if n <= m || f.maxActive.CompareAndSwap(m, n) {
			break
		}
	}
	progress(ota.Progress{Phase: ota.Downloading, BytesDone: 1, BytesTotal: t.Payload.Size, Transfer: ota.Transfer{BytesFetched: 10}})
	select {
	case <-time.After(f.delay):
	case <-ctx.Done():
		return ota.Wrap(ota.CodeCancelled, ctx.Err())
	}
	progress(ota.Progress{Phase: ota.Verifying, BytesDone: t.Payload.Size, BytesTotal: t.Payload.Size, Transfer: fakeTransfer(t)})
	if f.code != "" {
		return ota.Wrap(f.code, errors.New("bad bytes"))
	}
	return nil
}

// jsonChecker takes a Target as JSON; {"refuse": code} is refused.
type jsonChecker struct{}

func (jsonChecker) Check(raw []byte, f Facts) (Target, error) {
	var x struct {
		Target
		Refuse string `json:"refuse"`
	}
	if err := json.Unmarshal(raw, &x); err != nil {
		return Target{}, ota.Wrap(ota.Code("bad_envelope"), err)
	}
	if x.Refuse != "" {
		return Target{}, ota.Wrap(ota.Code(x.Refuse), errors.New("refused"))
	}
	if x.IssuedAt.Before(f.NewestIssuedAt) {
		return Target{}, ota.Wrap(ota.Code("stale"), errors.New("older than the newest accepted"))
	}
	return x.Target, nil
}

type fakeReboot struct{ n atomic.Int32 }

func (r *fakeReboot) Reboot(context.Context) error { r.n.Add(1); return nil }

type okHealth struct{}

func (okHealth) Check(context.Context) error { return nil }

type rig struct {
	a     *Agent
	store *memStore
	boot  *fakeBoot
	inst  *fakeInstaller
	rb    *fakeReboot
	stop  func() error
}

func newRig(t *testing.T, p Policy, inst *fakeInstaller) *rig {
	t.Helper()
	r := &rig{store: &memStore{}, boot: &fakeBoot{}, inst: inst, rb: &fakeReboot{}}
	a, err := New(Config{DeviceID: "dev-1", Policy: p, AgentVersion: "test", Logger: slog.New(slog.DiscardHandler)}, Deps{
		Store: r.store, Bootloader: r.boot, Installer: inst, Checker: jsonChecker{},
		Rebooter: r.rb, Health: okHealth{},
	})
	if err != nil {
		t.Fatal(err)
	}
	r.a = a
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx, "A", "boot-1") }()
	r.stop = sync.OnceValue(func() error { cancel(); return <-done })
	t.Cleanup(func() { r.stop() })
	return r
}

func offerJSON(t Target) []byte {
	b, _ := json.Marshal(t)
	return b
}

func TestInstallOutcomes(t *testing.T) {
	tests := []struct {
		name     string
		raw      []byte
		code     ota.Code // installer failure
		failBad  bool
		want     ota.Outcome
		wantOps  []string
		reboots  int32
		immediat bool
	}{
		{name: "good image is staged and the device reboots", raw: offerJSON(tgt("n", 1)), immediat: true,
			want: ota.Outcome{Result: ota.ResultStaged}, wantOps: []string{"good A", "bad B", "active B"}, reboots: 1},
		{name: "manual policy stages without rebooting", raw: offerJSON(tgt("n", 1)),
			want: ota.Outcome{Result: ota.ResultStaged}, wantOps: []string{"good A", "bad B", "active B"}, reboots: 0},
		{name: "hash mismatch fails and never flips", raw: offerJSON(tgt("n", 1)), code: "hash_mismatch",
			want: ota.Outcome{Result: ota.ResultFailed, Code: "hash_mismatch"}, wantOps: []string{"good A", "bad B"}},
		{name: "refused offer", raw: []byte(`{"refuse":"bad_signature"}`),
			want: ota.Outcome{Result: ota.ResultRejected, Code: "bad_signature"}, wantOps: []string{"good A"}},
		{name: "garbage", raw: []byte(`{`), want: ota.Outcome{Result: ota.ResultRejected, Code: "bad_envelope"}, wantOps: []string{"good A"}},
		{name: "bootloader cannot mark the slot bad: nothing is written", raw: offerJSON(tgt("n", 1)), failBad: true,
			want: ota.Outcome{Result: ota.ResultFailed, Code: ota.CodeWriteFailed}, wantOps: []string{"good A", "bad B"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			inst := &fakeInstaller{delay: time.Millisecond, code: tc.code}
			r := newRig(t, Policy{RebootImmediately: tc.immediat, MaxRestarts: 2}, inst)
			r.boot.failBad = tc.failBad
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			o, err := r.a.Install(ctx, tc.raw)
			if err != nil {
				t.Fatal(err)
			}
			if o.Result != tc.want.Result || o.Code != tc.want.Code {
				t.Fatalf("outcome = %+v, want %+v", o, tc.want)
			}
			r.stop()
			r.boot.mu.Lock()
			ops := fmt.Sprint(r.boot.ops)
			r.boot.mu.Unlock()
			if ops != fmt.Sprint(tc.wantOps) {
				t.Errorf("bootloader ops = %s, want %v", ops, tc.wantOps)
			}
			if got := r.rb.n.Load(); got != tc.reboots {
				t.Errorf("reboots = %d, want %d", got, tc.reboots)
			}
			if tc.failBad && inst.maxActive.Load() != 0 {
				t.Error("installer ran although the slot could not be marked bad")
			}
			// The journal and the published status agree.
			if st := r.a.Status(); st.Seq != r.store.s.Seq {
				t.Errorf("status seq %d, journal seq %d", st.Seq, r.store.s.Seq)
			}
		})
	}
}

// 100 offers fired at once: duplicates, conflicting images, stale ones. Never
// more than one writer; the agent ends on the newest.
func TestConcurrentOffers(t *testing.T) {
	inst := &fakeInstaller{delay: 2 * time.Millisecond}
	r := newRig(t, Policy{MaxRestarts: 2}, inst)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	names := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"}
	var wg sync.WaitGroup
	outcomes := make(chan ota.Outcome, 100)
	newest := tgt("z", 100)
	for i := range 100 {
		var raw []byte
		switch {
		case i == 37:
			raw = offerJSON(newest)
		case i%10 == 3:
			raw = []byte(`{"refuse":"bad_signature"}`)
		default:
			n := names[rand.IntN(len(names))]
			raw = offerJSON(tgt(n, rand.IntN(50)))
		}
		wg.Go(func() {
			o, err := r.a.Install(ctx, raw)
			if err != nil {
				t.Error(err)
			}
			outcomes <- o
		})
	}
	wg.Wait()
	close(outcomes)
	// The newest is staged, or (if an older one got past the flip before it
	// arrived) it waits in the pending place; nothing else is staged after it.
	newestTaken := 0
	for o := range outcomes {
		if (o.Result == ota.ResultStaged || o.Result == ota.ResultPending) && o.SHA256 == newest.SHA256() {
			newestTaken++
		}
	}
	if newestTaken == 0 {
		t.Error("the newest offer was neither staged nor pending")
	}
	if m := inst.maxActive.Load(); m != 1 {
		t.Errorf("max concurrent writers = %d, want 1", m)
	}
	st := r.a.Status()
	onNewest := st.Target != nil && st.Target.SHA256 == newest.SHA256() && st.Pending == nil
	waitsNewest := st.Pending != nil && st.Pending.SHA256 == newest.SHA256()
	// Under the manual policy an install past its flip is staged (issue 27).
	if st.State != ota.Staged || !(onNewest || waitsNewest) {
		t.Fatalf("final status %s target %+v pending %+v, want staged towards %s", st.State, st.Target, st.Pending, newest.ID)
	}
}

// Retained offers of several topics arrive in a burst: the newest is taken,
// and the older one never starts an install.
func TestOfferBurstTakesNewest(t *testing.T) {
	inst := &recordingInstaller{}
	store := &memStore{}
	a, err := New(Config{DeviceID: "dev-1", OfferSettle: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}, Deps{
		Store: store, Bootloader: &fakeBoot{}, Installer: inst, Checker: jsonChecker{}, Rebooter: &fakeReboot{}, Health: okHealth{},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx, "A", "boot-1") }()
	a.Offer("ota/groups/g/desired", offerJSON(tgt("old", 1)))
	a.Offer("ota/devices/d/desired", offerJSON(tgt("new", 2)))
	a.Offer("ota/groups/g/desired", offerJSON(tgt("older", 0))) // replaces "old" on its topic; still older
	time.Sleep(300 * time.Millisecond)
	cancel()
	<-done
	if got := inst.started(); fmt.Sprint(got) != "[rel-new]" {
		t.Fatalf("installs started: %v, want only rel-new", got)
	}
}

// recordingInstaller records the installs started; each writes until it is
// cancelled, or with quick set, succeeds at once.
type recordingInstaller struct {
	mu    sync.Mutex
	ids   []string
	quick bool
}

func (r *recordingInstaller) Install(ctx context.Context, job InstallJob, _ func(ota.Progress)) error {
	r.mu.Lock()
	r.ids = append(r.ids, job.Target.ID)
	r.mu.Unlock()
	if r.quick {
		return nil
	}
	<-ctx.Done()
	return ota.Wrap(ota.CodeCancelled, ctx.Err())
}

func (r *recordingInstaller) started() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.ids...)
}
