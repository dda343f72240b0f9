package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

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
type Journal struct{ Dir string }

// Path is the journal file.
func (j Journal) Path() string { return filepath.Join(j.Dir, JournalName) }

// Load reads the journal. A missing journal is a new device: the zero State
// and ok=false. A corrupt one is an error, never silently reset: it is the
// only record of what the slots hold.
func (j Journal) Load() (s State, ok bool, err error) {
	b, err := os.ReadFile(j.Path())
	if errors.Is(err, fs.ErrNotExist) {
		return State{Phase: ota.Idle, Slots: map[ota.Slot]SlotInfo{}}, false, nil
	}
	if err != nil {
		return State{}, false, fmt.Errorf("journal %s: %w", j.Path(), err)
	}
	var f journalFile
	if err := json.Unmarshal(b, &f); err != nil {
		return State{}, false, fmt.Errorf("journal %s: corrupt: %w", j.Path(), err)
	}
	if f.Version != journalVersion {
		return State{}, false, fmt.Errorf("journal %s: format version %d, this otad reads %d", j.Path(), f.Version, journalVersion)
	}
	switch f.Phase {
	case ota.Idle, ota.Downloading, ota.Verifying, ota.Staged, ota.Rebooting, ota.Confirming:
	default:
		return State{}, false, fmt.Errorf("journal %s: unknown state %q", j.Path(), f.Phase)
	}
	if f.Phase != ota.Idle && f.Target == nil {
		return State{}, false, fmt.Errorf("journal %s: state %s without a target", j.Path(), f.Phase)
	}
	if f.Slots == nil {
		f.Slots = map[ota.Slot]SlotInfo{}
	}
	return f.State, true, nil
}

// Save replaces the journal atomically: temp file, fsync, rename, fsync the
// directory. A crash at any point leaves either the old or the new journal.
func (j Journal) Save(s State) error {
	b, err := json.MarshalIndent(journalFile{Version: journalVersion, State: s}, "", "  ")
	if err != nil {
		return fmt.Errorf("journal: encode: %w", err)
	}
	return durable.WriteFile(j.Path(), append(b, '\n'), 0o600)
}
