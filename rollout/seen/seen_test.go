package seen

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/durable"
)

const key = "mqtt://b:1883 ota/rollouts/r1"

func TestCountersSurviveAReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	must(t, s.Raise(key, State, 7<<32|3, false))
	must(t, s.Raise(key, Command, 1700000000000, false))
	must(t, s.Raise(key, State, 5, false)) // lower: kept as it was

	s, err = Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		kind   Kind
		n      uint64
		refuse bool
	}{
		{State, 7<<32 | 3, false}, // the same counter: the retained state delivered again
		{State, 7<<32 | 4, false},
		{State, 8 << 32, false},
		{State, 7<<32 | 2, true},
		{State, 1, true},
		{Command, 1700000000000, false},
		{Command, 1699999999999, true},
	}
	for _, tc := range tests {
		err := s.Check(key, tc.kind, "ota/rollouts/r1/state", tc.n)
		if tc.refuse != (err != nil) {
			t.Errorf("Check(%v, %d) = %v, want refused %v", tc.kind, tc.n, err, tc.refuse)
		}
		if err != nil && (!errors.Is(err, ErrReplayed) || !strings.Contains(err.Error(), fmt.Sprintf("counter %d older than", tc.n))) {
			t.Errorf("Check(%v, %d) = %q: want it to name the replay and both counters", tc.kind, tc.n, err)
		}
	}
	if err := s.Check("mqtt://other:1883 ota/rollouts/r1", State, "t", 1); err != nil {
		t.Errorf("the same name on another broker is another rollout: %v", err)
	}
	if st, err := os.Stat(s.Path()); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("counters file: %v, mode %v; want 0600", err, st.Mode())
	}
}

// A crash at any step of a replacement leaves the old counters or the new,
// and a file left half written (a temporary file) is not read.
func TestCountersCrashSafe(t *testing.T) {
	for _, step := range []string{"write", "sync", "rename", "syncdir"} {
		t.Run(step, func(t *testing.T) {
			dir := t.TempDir()
			s, err := Open(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			must(t, s.Raise(key, State, 10, false))
			crashing, err := Open(dir, &crashFS{at: step})
			if err != nil {
				t.Fatal(err)
			}
			if err := crashing.Raise(key, State, 11, false); err == nil {
				t.Fatal("Raise through a crashing file system: no error")
			}
			after, err := Open(dir, nil)
			if err != nil {
				t.Fatalf("reopen after a crash at %s: %v", step, err)
			}
			want := uint64(10)
			if step == "syncdir" { // renamed: the new content is in place
				want = 11
			}
			if got := after.Highest(key, State); got != want {
				t.Errorf("after a crash at %s: counter %d, want %d", step, got, want)
			}
		})
	}
}

func TestCountersRefuseADamagedFile(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	must(t, s.Raise(key, State, 10, false))
	good, err := os.ReadFile(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string][]byte{
		"torn":       good[:len(good)/2],
		"empty":      {},
		"not json":   []byte("state=10\n"),
		"wrong type": []byte(`{"type":"otad-journal-v1","rollouts":{}}`),
		"two":        append(append([]byte{}, good...), good...),
		"unknown":    []byte(`{"type":"otad-rollout-counters-v1","rollouts":{"k":{"state":1,"epoch":2,"seen":"2026-01-01T00:00:00Z"}}}`),
	} {
		t.Run(name, func(t *testing.T) {
			if err := os.WriteFile(s.Path(), content, 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Open(dir, nil)
			if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), s.Path()) || !strings.Contains(err.Error(), "remove it") {
				t.Errorf("Open of a %s file: %v; want ErrDamaged naming the file and what to do", name, err)
			}
		})
	}
}

func TestCountersBounded(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.live, s.ended = 5, 3
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s.now = func() time.Time { clock = clock.Add(time.Second); return clock }
	for i := range 8 {
		must(t, s.Raise(fmt.Sprintf("live-%d", i), State, 1, false))
		must(t, s.Raise(fmt.Sprintf("ended-%d", i), State, 1, true))
	}
	// A live rollout that ends moves to the ended ones (and pushes the
	// oldest of those out).
	must(t, s.Raise("live-7", State, 2, true))

	r, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.live, r.ended = s.live, s.ended
	r.m, err = r.read()
	if err != nil {
		t.Fatal(err)
	}
	var live, ended []string
	for k, e := range r.m {
		if e.Ended {
			ended = append(ended, k)
		} else {
			live = append(live, k)
		}
	}
	if len(live) > 5 || len(ended) > 3 {
		t.Fatalf("kept %d live and %d ended rollouts, want at most 5 and 3: %v %v", len(live), len(ended), live, ended)
	}
	for _, k := range []string{"live-6", "live-3", "ended-7", "ended-6", "live-7"} {
		if _, ok := r.m[k]; !ok {
			t.Errorf("%s (seen lately) was pruned", k)
		}
	}
	for _, k := range []string{"live-0", "live-1", "ended-0", "ended-5"} {
		if _, ok := r.m[k]; ok {
			t.Errorf("%s (seen longest ago) was kept", k)
		}
	}
	if !r.m["live-7"].Ended || r.m["live-7"].State != 2 {
		t.Errorf("live-7 = %+v, want ended at counter 2", r.m["live-7"])
	}
}

// Two readers sharing the directory (two controllers, a dashboard) keep
// each other's counters: each write merges what is on disk.
func TestCountersShared(t *testing.T) {
	dir := t.TempDir()
	a, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	must(t, a.Raise("a", State, 3, false))
	must(t, b.Raise("b", Command, 4, false))
	must(t, a.Raise("b", Command, 2, false)) // older than b's: b's stays
	r, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Highest("a", State) != 3 || r.Highest("b", Command) != 4 {
		t.Errorf("shared file: a %d, b %d; want 3 and 4", r.Highest("a", State), r.Highest("b", Command))
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// crashFS fails (as a crash would stop) at one step of a replacement.
type crashFS struct {
	durable.OS
	at string
}

type crashFile struct {
	durable.File
	at string
}

func (c *crashFS) CreateTemp(dir, pattern string) (durable.File, error) {
	f, err := c.OS.CreateTemp(dir, pattern)
	if err != nil {
		return nil, err
	}
	return crashFile{f, c.at}, nil
}

var errCrash = errors.New("crash")

func (f crashFile) Write(b []byte) (int, error) {
	if f.at == "write" {
		n, _ := f.File.Write(b[:len(b)/2])
		return n, errCrash
	}
	return f.File.Write(b)
}

func (f crashFile) Sync() error {
	if f.at == "sync" {
		return errCrash
	}
	return f.File.Sync()
}

func (c *crashFS) Rename(o, n string) error {
	if c.at == "rename" {
		return errCrash
	}
	return c.OS.Rename(o, n)
}

func (c *crashFS) SyncDir(dir string) error {
	if c.at == "syncdir" {
		return errCrash
	}
	return c.OS.SyncDir(dir)
}

// The temporary file a crash leaves is never read as the counters.
func TestCountersIgnoreLeftovers(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "."+FileName+".tmp-123"), []byte(`{"ty`), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Known(key) {
		t.Error("a leftover temporary file was read")
	}
}

// A directory others may write is refused: they could lower the counters.
func TestCountersRefuseAnOpenDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, nil); err == nil || !strings.Contains(err.Error(), "others may write it") {
		t.Errorf("Open of a directory of mode 0777: %v", err)
	}
}
