package operator

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/otad/otad/fleetview"
	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/rollout"
)

// nameAndConfig parses a rollout subcommand's flags and its one NAME.
func nameAndConfig(fs *flag.FlagSet, bf *brokerFlags, args []string) (string, mqtt.Config, error) {
	pos, err := parseFlags(fs, args)
	if err != nil {
		return "", mqtt.Config{}, err
	}
	if len(pos) != 1 {
		return "", mqtt.Config{}, usagef("want exactly one rollout NAME, got %d arguments", len(pos))
	}
	// Plans take only names every broker carries (mqtt.CheckName); any
	// other NAME is no rollout and, on RabbitMQ, not even its topic.
	if err := mqtt.CheckName(pos[0]); err != nil {
		return "", mqtt.Config{}, usagef("rollout NAME: %v", err)
	}
	cfg, err := bf.config()
	return pos[0], cfg, err
}

// rolloutSession follows a rollout's retained state.
type rolloutSession struct {
	sess    *mqtt.Session
	raw     []byte
	state   rollout.State
	updates chan rollout.State // states published after the first, newest kept
}

// openRollout reads a rollout's retained state; no state is an error.
func openRollout(ctx context.Context, cfg mqtt.Config, name string) (*rolloutSession, error) {
	topic := mqtt.Topics{Prefix: cfg.TopicPrefix}.RolloutState(name)
	rs := &rolloutSession{updates: make(chan rollout.State, 1)}
	var (
		mu    sync.Mutex
		first = true
	)
	sess, err := mqtt.Open(ctx, cfg, map[string]byte{topic: 1}, func(m mqtt.Message) {
		s, err := rollout.DecodeState(m.Payload)
		if err != nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if first {
			rs.raw, rs.state, first = m.Payload, s, false
			return
		}
		select { // keep only the newest
		case <-rs.updates:
		default:
		}
		rs.updates <- s
	})
	if err != nil {
		return nil, err
	}
	if err := sess.Sync(ctx); err != nil {
		sess.Close()
		return nil, err
	}
	mu.Lock()
	defer mu.Unlock()
	if first {
		sess.Close()
		return nil, fmt.Errorf("no rollout %q: nothing retained on %s", name, topic)
	}
	rs.sess = sess
	return rs, nil
}

// liveTable shows a rollout's state as it changes: redrawn in place on a
// terminal, else a line per change of its history.
type liveTable struct {
	w    io.Writer
	tty  bool
	last *rollout.Change // the newest history entry printed
}

func newLiveTable(w io.Writer) *liveTable { return &liveTable{w: w, tty: fleetview.IsTerminal(w)} }

func (l *liveTable) show(s rollout.State) {
	if l.tty {
		io.WriteString(l.w, "\x1b[H\x1b[2J") // home, clear screen
		rollout.Render(l.w, s, 8)
		return
	}
	from := 0
	if l.last != nil {
		for i := len(s.History) - 1; i >= 0; i-- {
			if s.History[i] == *l.last {
				from = i + 1
				break
			}
		}
	}
	for _, c := range s.History[from:] {
		fmt.Fprintf(l.w, "%s  %s\n", c.Time.Local().Format(time.DateTime), c.Event)
	}
	if n := len(s.History); n > 0 {
		l.last = &s.History[n-1]
	}
}

// done shows the final state; off a terminal, the table after the lines.
func (l *liveTable) done(s rollout.State) {
	l.show(s)
	if !l.tty {
		fmt.Fprintln(l.w)
		rollout.Render(l.w, s, 0)
	}
}
