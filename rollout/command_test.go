package rollout

import (
	"strings"
	"testing"
	"time"
)

func TestDecodeCommand(t *testing.T) {
	tests := []struct {
		in, err string
		want    Command
	}{
		{`{"id":"c1","op":"pause","reason":"tickets","by":"alice","time":"2026-11-29T11:00:00Z"}`, "",
			Command{ID: "c1", Op: OpPause, Reason: "tickets", By: "alice", Time: time.Date(2026, 11, 29, 11, 0, 0, 0, time.UTC)}},
		{`{"id":"c2","op":"abort"}`, "", Command{ID: "c2", Op: OpAbort}},
		{`{"op":"resume"}`, "command without an id", Command{}},
		{`{"id":"c3","op":"restart"}`, `unknown op "restart"`, Command{}},
		{`pause`, "not a command", Command{}},
		{``, "not a command", Command{}},
	}
	for _, tc := range tests {
		got, err := DecodeCommand([]byte(tc.in))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %+v %v, want %+v", tc.in, got, err, tc.want)
		}
	}
	c := NewCommand(OpResume, "fixed", "bob", t0)
	b, err := c.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if again, err := DecodeCommand(b); err != nil || again != c || len(c.ID) != 16 || NewCommand(OpResume, "", "", t0).ID == c.ID {
		t.Fatalf("command %+v round trips as %+v (%v); IDs must be fresh", c, again, err)
	}
}

// Control messages come from the broker: whatever arrives, a command is
// returned only with an ID and a known op.
func FuzzDecodeCommand(f *testing.F) {
	f.Add([]byte(`{"id":"c1","op":"pause","time":"2026-11-29T11:00:00Z"}`))
	f.Add([]byte(`{"id":"","op":"abort"}`))
	f.Add([]byte(`{"id":"c1","op":"pause","time":"x"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeCommand(b)
		if err == nil && (c.ID == "" || !c.Op.Valid()) {
			t.Fatalf("accepted %q as %+v", b, c)
		}
	})
}
