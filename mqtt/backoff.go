package mqtt

import (
	"math/rand/v2"
	"time"
)

// Backoff is how a device (re)connects. Every wait is drawn uniformly from
// [0, window) ("full jitter"), the window starting at First and doubling
// after each failed attempt up to Max. A lost connection waits such a draw
// from First before its first attempt: when a broker restarts, a fleet's
// reconnects spread over First instead of arriving in the same second, and
// when the broker turns them away (AWS IoT Core takes 500 connects a second
// per account) the windows grow until the fleet fits. paho's own
// auto-reconnect retries at once and then doubles without jitter, so the
// device does not use it.
type Backoff struct {
	First time.Duration // default 5s
	Max   time.Duration // default 2m
}

const (
	defaultReconnectFirst = 5 * time.Second
	defaultReconnectMax   = 2 * time.Minute
)

func (b Backoff) orDefaults() Backoff {
	if b.First <= 0 {
		b.First = defaultReconnectFirst
	}
	if b.Max < b.First {
		b.Max = max(b.First, defaultReconnectMax)
	}
	return b
}

// Window is the range the wait after failures consecutive failed attempts
// (0: after a lost connection) is drawn from.
func (b Backoff) Window(failures int) time.Duration {
	b = b.orDefaults()
	w := b.First
	for range failures {
		if w >= b.Max/2 {
			return b.Max
		}
		w *= 2
	}
	return min(w, b.Max)
}

// Wait draws the wait after failures consecutive failed attempts.
func (b Backoff) Wait(failures int) time.Duration {
	return rand.N(b.Window(failures))
}
