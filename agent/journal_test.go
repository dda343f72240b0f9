package agent

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/ota"
)

// The in-memory journal keeps what the file keeps, and nothing the agent
// changes after Save.
func TestMemJournalMatchesTheFile(t *testing.T) {
	file, mem := Journal{Dir: t.TempDir()}, &MemJournal{}
	for name, s := range map[string]Store{"file": file, "memory": mem} {
		st, ok, err := s.Load()
		if err != nil || ok || st.Phase != ota.Idle || st.Slots == nil {
			t.Fatalf("%s: new device: %+v, %v, %v", name, st, ok, err)
		}
	}
	want := State{Phase: ota.Downloading, Seq: 7, Target: &Target{ID: "rel-1", Slot: ota.SlotB},
		Slots: map[ota.Slot]SlotInfo{ota.SlotA: {Version: "1"}}, NewestIssuedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	for _, s := range []Store{file, mem} {
		if err := s.Save(want); err != nil {
			t.Fatal(err)
		}
	}
	want.Slots[ota.SlotA] = SlotInfo{Version: "changed after Save"}
	fromFile, _, err1 := file.Load()
	fromMem, ok, err2 := mem.Load()
	if err1 != nil || err2 != nil || !ok {
		t.Fatalf("load: %v, %v", err1, err2)
	}
	if !reflect.DeepEqual(fromFile, fromMem) || fromMem.Slots[ota.SlotA].Version != "1" {
		t.Fatalf("memory %+v\nfile %+v", fromMem, fromFile)
	}
	if err := mem.Save(State{Phase: ota.Staged}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := mem.Load(); err == nil || !strings.Contains(err.Error(), "without a target") {
		t.Fatalf("a state the file would refuse: %v", err)
	}
}
