package rollout

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Op is an operator command.
type Op string

const (
	OpPause  Op = "pause"
	OpResume Op = "resume"
	OpAbort  Op = "abort"
)

// Valid reports whether op is one of the three commands.
func (op Op) Valid() bool { return op == OpPause || op == OpResume || op == OpAbort }

// Command is an operator's command, as carried on the control topic
// (ota/rollouts/{name}/control, docs/contract/rollouts.md).
type Command struct {
	ID     string    `json:"id"` // unique per command: a redelivered command is applied once
	Op     Op        `json:"op"`
	Reason string    `json:"reason,omitempty"`
	By     string    `json:"by,omitempty"`
	Time   time.Time `json:"time"`
}

// NewCommand is a command with a fresh random ID.
func NewCommand(op Op, reason, by string, now time.Time) Command {
	id := make([]byte, 8)
	rand.Read(id)
	return Command{ID: hex.EncodeToString(id), Op: op, Reason: reason, By: by, Time: now.UTC()}
}

// Encode is the command as published on the control topic.
func (c Command) Encode() ([]byte, error) { return json.Marshal(c) }

// DecodeCommand reads a control message (outside input): a command needs
// an ID (so it is applied once) and a known op.
func DecodeCommand(b []byte) (Command, error) {
	var c Command
	if len(b) > MaxReadSize {
		return c, fmt.Errorf("command of %d bytes, over the limit of %d", len(b), MaxReadSize)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("not a command: %w", err)
	}
	switch {
	case c.ID == "":
		return c, errors.New("command without an id")
	case !c.Op.Valid():
		return c, fmt.Errorf("unknown op %q", c.Op)
	}
	return c, c.bounds()
}
