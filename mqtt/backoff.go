package mqtt

import (
	"time"

	"github.com/otad/otad/backoff"
)

// Backoff is how a device (re)connects: full jitter (backoff.Policy), the
// window starting at First and doubling after each failed attempt up to
// Max. A lost connection waits such a draw from First before its first
// attempt: when a broker restarts, a fleet's reconnects spread over First
// instead of arriving in the same second, and when the broker turns them
// away (AWS IoT Core takes 500 connects a second per account) the windows
// grow until the fleet fits. paho's own auto-reconnect retries at once and
// then doubles without jitter, so the device does not use it.
type Backoff struct {
	First time.Duration // default 5s
	Max   time.Duration // default 2m
}

const (
	defaultReconnectFirst = 5 * time.Second
	defaultReconnectMax   = 2 * time.Minute
)

// policy is b with the defaults of docs/contract/mqtt.md; it retries for as
// long as the connection runs. The window after failures consecutive
// failed attempts (0: after a lost connection) is policy().Window(failures).
func (b Backoff) policy() backoff.Policy {
	if b.First <= 0 {
		b.First = defaultReconnectFirst
	}
	if b.Max < b.First {
		b.Max = max(b.First, defaultReconnectMax)
	}
	return backoff.Policy{Base: b.First, Max: b.Max}
}
