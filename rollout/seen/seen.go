// Package seen keeps, on disk, the highest counter a reader of the signed
// control plane has seen per rollout: of its state, and of the operator's
// commands (docs/contract/rollouts.md, a signed control plane). A signature
// proves who wrote a message, not that it is the newest: without this, a
// controller or dashboard started again would take an older signed state
// or command that someone published again while it was down.
//
// The file is replaced durably (write a temporary file, fsync, rename,
// fsync the directory) under a lock, merged with what is on disk first, so
// several readers sharing the directory (two controllers of two rollouts,
// a dashboard) never lose each other's counters. It is bounded: at most
// MaxLive rollouts not yet ended and MaxEnded ended ones, the ones seen
// longest ago pruned first.
package seen

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/otad/otad/durable"
)

// FileName is the counters' file in the state directory; LockName the lock
// its writers take.
const (
	FileName = "rollout-counters.json"
	LockName = "rollout-counters.lock"
)

// fileType marks the file, so that another file in its place is not read
// as counters.
const fileType = "otad-rollout-counters-v1"

// The bounds of the file: about 200 bytes an entry.
const (
	MaxLive  = 1024 // rollouts not ended (the dashboard follows at most 1,000)
	MaxEnded = 256  // finished or aborted ones: no message can move them on
	maxFile  = 1 << 20
)

// Kind is what a counter counts.
type Kind int

const (
	// State: a rollout's state, counted by (lease epoch, sequence number)
	// (rollout.State.Counter).
	State Kind = iota
	// Command: an operator's command, counted by its time: one counter for
	// every op, as a controller orders them (an older pause published again
	// after a newer resume is a replay).
	Command
)

func (k Kind) String() string {
	if k == Command {
		return "command"
	}
	return "state"
}

// ErrReplayed marks a message older than one already seen.
var ErrReplayed = errors.New("replayed")

// ErrDamaged marks a counters' file that cannot be read.
var ErrDamaged = errors.New("damaged")

// Entry is one rollout's counters.
type Entry struct {
	State   uint64    `json:"state,omitempty"`
	Command uint64    `json:"command,omitempty"`
	Ended   bool      `json:"ended,omitempty"`
	Seen    time.Time `json:"seen"` // when a counter last rose
}

func (e Entry) get(k Kind) uint64 {
	if k == Command {
		return e.Command
	}
	return e.State
}

// merge keeps the higher of each counter and the later time.
func (e Entry) merge(o Entry) Entry {
	e.State, e.Command = max(e.State, o.State), max(e.Command, o.Command)
	e.Ended = e.Ended || o.Ended
	if o.Seen.After(e.Seen) {
		e.Seen = o.Seen
	}
	return e
}

type file struct {
	Type     string           `json:"type"`
	Rollouts map[string]Entry `json:"rollouts"`
}

// Store is the counters of one state directory. It is safe for concurrent
// use; a nil *Store keeps nothing and refuses nothing.
type Store struct {
	dir  string
	fsys durable.FS
	now  func() time.Time
	// live, ended: the bounds (MaxLive, MaxEnded; smaller in tests).
	live, ended int
	mu          sync.Mutex
	m           map[string]Entry
}

// Key names a rollout for the store: its brokers (a rollout of the same
// name on another fleet is another rollout), its topic prefix and name.
func Key(brokers []string, prefix, name string) string {
	b := slices.Clone(brokers)
	sort.Strings(b)
	return strings.Join(b, ",") + " " + prefix + "/rollouts/" + name
}

// Open reads the counters kept in dir, creating dir (0700) when missing. A
// file that does not read whole (torn, truncated, not counters) is
// refused: guessing would let an older message through. fsys is where the
// file is replaced (nil: the operating system's).
func Open(dir string, fsys durable.FS) (*Store, error) {
	if fsys == nil {
		fsys = durable.OS{}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("rollout counters: %w", err)
	}
	// Whoever else may write the directory could lower the counters.
	if fi, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("rollout counters: %w", err)
	} else if fi.Mode().Perm()&0o022 != 0 {
		return nil, fmt.Errorf("rollout counters: %s is mode %#o: others may write it (and lower the counters kept there); chmod go-w it", dir, fi.Mode().Perm())
	}
	s := &Store{dir: dir, fsys: fsys, now: time.Now, live: MaxLive, ended: MaxEnded}
	m, err := s.read()
	if err != nil {
		return nil, err
	}
	s.m = m
	return s, nil
}

// Path is the counters' file.
func (s *Store) Path() string {
	if s == nil {
		return ""
	}
	return filepath.Join(s.dir, FileName)
}

func (s *Store) read() (map[string]Entry, error) {
	f, err := os.Open(s.Path())
	if errors.Is(err, os.ErrNotExist) {
		return map[string]Entry{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("rollout counters: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFile+1))
	if err != nil {
		return nil, fmt.Errorf("rollout counters %s: %w", s.Path(), err)
	}
	damaged := func(why string) error {
		return fmt.Errorf("rollout counters %s: %w (%s): refusing to guess which messages were seen; "+
			"remove it to trust the brokers' newest messages again", s.Path(), ErrDamaged, why)
	}
	if len(b) > maxFile {
		return nil, damaged(fmt.Sprintf("over %d bytes", maxFile))
	}
	var fl file
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&fl); err != nil {
		return nil, damaged(err.Error())
	}
	if dec.More() || fl.Type != fileType {
		return nil, damaged("not a file of rollout counters")
	}
	if len(fl.Rollouts) > s.live+s.ended {
		return nil, damaged(fmt.Sprintf("%d rollouts, over the bound of %d", len(fl.Rollouts), s.live+s.ended))
	}
	if fl.Rollouts == nil {
		fl.Rollouts = map[string]Entry{}
	}
	return fl.Rollouts, nil
}

// Highest is the highest counter of kind seen for key (0: none).
func (s *Store) Highest(key string, k Kind) uint64 {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[key].get(k)
}

// Known reports whether key has an entry.
func (s *Store) Known(key string) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.m[key]
	return ok
}

// Check refuses a message of kind with counter n on topic when a higher
// one was seen for key: the same counter is the message seen (a retained
// message delivered again), not a replay.
func (s *Store) Check(key string, k Kind, topic string, n uint64) error {
	if m := s.Highest(key, k); n < m {
		return fmt.Errorf("%w %s on %s refused: counter %d older than %d seen", ErrReplayed, k, topic, n, m)
	}
	return nil
}

// Raise records counter n of kind for key, and that the rollout ended, and
// keeps it on disk before it returns when either is news.
func (s *Store) Raise(key string, k Kind, n uint64, ended bool) error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[key]
	if ok && n <= e.get(k) && (!ended || e.Ended) {
		return nil
	}
	e = e.merge(Entry{Ended: ended, Seen: s.now().UTC()})
	if k == Command {
		e.Command = max(e.Command, n)
	} else {
		e.State = max(e.State, n)
	}
	return s.write(key, e)
}

// write merges the file (another reader may have raised counters since it
// was read) with e for key, bounds it, and replaces it, under the lock.
func (s *Store) write(key string, e Entry) error {
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	disk, err := s.read()
	if err != nil {
		return err
	}
	for k, d := range disk {
		s.m[k] = s.m[k].merge(d)
	}
	s.m[key] = s.m[key].merge(e)
	prune(s.m, key, s.live, s.ended)
	b, err := json.Marshal(file{Type: fileType, Rollouts: s.m})
	if err != nil {
		return err
	}
	return durable.WriteFileOn(s.fsys, s.Path(), append(b, '\n'), 0o600)
}

func (s *Store) lock() (func(), error) {
	path := filepath.Join(s.dir, LockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("rollout counters: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("rollout counters: lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil // closing lets the lock go
}

// prune keeps at most maxEnded ended and maxLive other rollouts, dropping
// those seen longest ago; keep (the one just raised) stays.
func prune(m map[string]Entry, keep string, maxLive, maxEnded int) {
	for _, ended := range []bool{true, false} {
		bound := maxLive
		if ended {
			bound = maxEnded
		}
		var keys []string
		for k, e := range m {
			if e.Ended == ended && k != keep {
				keys = append(keys, k)
			}
		}
		if m[keep].Ended == ended {
			bound--
		}
		if len(keys) <= bound {
			continue
		}
		sort.Slice(keys, func(i, j int) bool {
			a, b := m[keys[i]].Seen, m[keys[j]].Seen
			return a.Before(b) || a.Equal(b) && keys[i] < keys[j]
		})
		for _, k := range keys[:len(keys)-bound] {
			delete(m, k)
		}
	}
}
