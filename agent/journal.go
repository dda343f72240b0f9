package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/otad/otad/durable"
	"github.com/otad/otad/ota"
)

// JournalName is the journal's file name inside the state directory.
const JournalName = "journal.json"

// journalVersion is the on-disk format; a newer one is refused, not misread.
const journalVersion = 1

type journalFile struct {
	Version int `json:"journal_version"`
	State
}

// Journal stores the agent's State durably in <dir>/journal.json.
type Journal struct {
	Dir string
	// FS is where the journal is replaced; nil is the operating system's.
	FS durable.FS
}

// Path is the journal file.
func (j Journal) Path() string { return filepath.Join(j.Dir, JournalName) }

// Load reads the journal. A missing journal is a new device: the zero State
// and ok=false. A corrupt one is an error, never silently reset: it is the
// only record of what the slots hold.
func (j Journal) Load() (s State, ok bool, err error) {
	b, err := os.ReadFile(j.Path())
	if errors.Is(err, fs.ErrNotExist) {
		return newState(), false, nil
	}
	if err != nil {
		return State{}, false, fmt.Errorf("journal %s: %w", j.Path(), err)
	}
	return decodeJournal(b, j.Path())
}

// Save replaces the journal atomically: temp file, fsync, rename, fsync the
// directory. A crash at any point leaves either the old or the new journal.
func (j Journal) Save(s State) error {
	b, err := encodeJournal(s)
	if err != nil {
		return err
	}
	return durable.WriteFileOn(j.FS, j.Path(), b, 0o600)
}

func newState() State { return State{Phase: ota.Idle, Slots: map[ota.Slot]SlotInfo{}} }

func encodeJournal(s State) ([]byte, error) {
	b, err := json.MarshalIndent(journalFile{Version: journalVersion, State: s}, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("journal: encode: %w", err)
	}
	return append(b, '\n'), nil
}

// decodeJournal checks what a journal holds; name says where it came from.
func decodeJournal(b []byte, name string) (State, bool, error) {
	var f journalFile
	if err := json.Unmarshal(b, &f); err != nil {
		return State{}, false, fmt.Errorf("journal %s: corrupt: %w", name, err)
	}
	if f.Version != journalVersion {
		return State{}, false, fmt.Errorf("journal %s: format version %d, this otad reads %d", name, f.Version, journalVersion)
	}
	switch f.Phase {
	case ota.Idle, ota.Downloading, ota.Verifying, ota.Staged, ota.Rebooting, ota.Confirming:
	default:
		return State{}, false, fmt.Errorf("journal %s: unknown state %q", name, f.Phase)
	}
	if f.Phase != ota.Idle && f.Target == nil {
		return State{}, false, fmt.Errorf("journal %s: state %s without a target", name, f.Phase)
	}
	if f.Slots == nil {
		f.Slots = map[ota.Slot]SlotInfo{}
	}
	return f.State, true, nil
}

// MemJournal is a journal in memory, for simulated devices: the same
// encoding as Journal, so a state that would not survive the file does not
// survive here either, and no state shared with the agent after Save. It
// outlives the agent it was given to, as a journal file outlives otad.
type MemJournal struct {
	mu sync.Mutex
	b  []byte
}

// Load returns what the last Save stored; before any, a new device's state.
func (m *MemJournal) Load() (State, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.b == nil {
		return newState(), false, nil
	}
	return decodeJournal(m.b, "in memory")
}

// Save stores s.
func (m *MemJournal) Save(s State) error {
	b, err := encodeJournal(s)
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.b = b
	m.mu.Unlock()
	return nil
}
