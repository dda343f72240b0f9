package mqtt

import (
	"context"
	"log/slog"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

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

// redial connects c at once (or, when up, after its live connection is
// lost), and again after every lost connection (one value on lost for
// each), waiting a draw from b before each attempt but the very first,
// until ctx ends. paho tries the config's brokers in order on each
// attempt, so a lost node is failed over from.
func redial(ctx context.Context, c paho.Client, b Backoff, timeout time.Duration, lost <-chan struct{}, log *slog.Logger, up bool) {
	p := b.policy()
	failures := -1 // the first attempt does not wait
	for {
		if up {
			select {
			case <-ctx.Done():
				return
			case <-lost:
			}
			failures, up = 0, false
		}
		if failures >= 0 {
			sleep := p.Draw(failures)
			log.Info("mqtt: connecting", "in", sleep.Round(time.Millisecond), "failed_attempts", failures)
			if p.Pause(ctx, sleep) != nil {
				return
			}
		}
		err := waitToken(ctx, c.Connect(), timeout)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			failures++
			log.Warn("mqtt: connect failed", "err", err)
			continue
		}
		up = true
	}
}
