package rollout

import (
	"log/slog"
	"sync"

	"github.com/otad/otad/mqtt"
)

// commandQueue bounds the commands waiting for the driver: operators send a
// few; a flood is dropped with a warning rather than held.
const commandQueue = 64

// Inbox is what a controller hears on its rollout's own topics
// (docs/contract/rollouts.md): the retained state, which it starts from
// (Driver.Start), and the operator's commands on the control topic, decoded
// and queued for Driver.Commands. The caller subscribes to Topics on the
// session it follows the fleet with and hands their messages to Receive.
type Inbox struct {
	state, control string
	log            *slog.Logger
	cmds           chan Command

	mu       sync.Mutex
	taken    bool // Retained was called: later states are our own, echoed
	retained []byte
}

// NewInbox listens for rollout name under the topic prefix t.Prefix.
func NewInbox(t mqtt.Topics, name string, log *slog.Logger) *Inbox {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Inbox{state: t.RolloutState(name), control: t.RolloutControl(name), log: log, cmds: make(chan Command, commandQueue)}
}

// Topics are the subscriptions the inbox needs, with their QoS.
func (in *Inbox) Topics() map[string]byte { return map[string]byte{in.state: 1, in.control: 1} }

// Receive takes one message of Topics; others are ignored. A control
// message that is no command is logged and dropped.
func (in *Inbox) Receive(m mqtt.Message) {
	switch m.Topic {
	case in.state:
		in.mu.Lock()
		if !in.taken {
			in.retained = m.Payload
		}
		in.mu.Unlock()
	case in.control:
		c, err := DecodeCommand(m.Payload)
		if err != nil {
			in.log.Warn("rollout: ignoring a control message", "topic", m.Topic, "err", err)
			return
		}
		select {
		case in.cmds <- c:
		default:
			in.log.Warn("rollout: command queue full; ignoring a command", "id", c.ID, "op", c.Op)
		}
	}
}

// Retained is the state retained on the state topic, nil when there is
// none; call it once the session has synced its subscriptions. After it,
// state messages are ignored: they are the controller's own publishes.
func (in *Inbox) Retained() []byte {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.taken = true
	return in.retained
}

// Commands are the operator's commands, in the order they arrived.
func (in *Inbox) Commands() <-chan Command { return in.cmds }
