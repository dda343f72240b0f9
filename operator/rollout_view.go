package operator

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/rollout"
	"github.com/otad/otad/rollout/controller"
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

// openRollout reads a rollout's retained state (the newest copy of every
// broker's) and follows it; no state is an error, and so is a state that
// cannot be read (over the limit: never taken for none).
func openRollout(ctx context.Context, cfg mqtt.Config, trust rollout.Trust, name string) (*rolloutSession, error) {
	raw, s, err := controller.ReadState(ctx, cfg, trust, name)
	if err != nil {
		return nil, err
	}
	topic := mqtt.Topics{Prefix: cfg.TopicPrefix}.RolloutState(name)
	rs := &rolloutSession{raw: raw, state: s, updates: make(chan rollout.State, 1)}
	var mu sync.Mutex
	sess, err := mqtt.Open(ctx, cfg, map[string]byte{topic: 1}, func(m mqtt.Message) {
		if m.Oversized > 0 {
			return
		}
		next, _, err := trust.OpenState(topic, m.Payload)
		if err != nil {
			return // forged, or not a state: never shown
		}
		mu.Lock()
		defer mu.Unlock()
		if !next.Newer(s) {
			return // the retained copy delivered on subscribing, or an older node's
		}
		s = next
		select { // keep only the newest
		case <-rs.updates:
		default:
		}
		rs.updates <- next
	})
	if err != nil {
		return nil, err
	}
	rs.sess = sess
	return rs, nil
}

// publishEverywhere publishes a retained message through sess and, when
// there are several brokers, through each of them (publishOnEveryNode),
// for a controller started on any node. One broker taking it is enough.
func publishEverywhere(ctx context.Context, cfg mqtt.Config, sess *mqtt.Session, payload []byte, topic string) error {
	err := sess.PublishRetained(ctx, payload, topic)
	if len(cfg.BrokerList()) == 1 {
		return err
	}
	if perr := publishOnEveryNode(ctx, cfg, topic, payload, io.Discard); err != nil {
		return perr
	}
	return nil
}

// liveTable shows a rollout's state as it changes: redrawn in place on a
// terminal, else a line per change of its history.
type liveTable struct {
	ctx  context.Context
	w    io.Writer
	tty  bool
	last *rollout.Change // the newest history entry printed
}

// newLiveTable shows states on w until ctx ends.
func newLiveTable(ctx context.Context, w io.Writer) *liveTable {
	return &liveTable{ctx: ctx, w: w, tty: ota.IsTerminal(w)}
}

func (l *liveTable) show(s rollout.State) {
	if l.tty {
		io.WriteString(l.w, "\x1b[H\x1b[2J") // home, clear screen
		rollout.Render(l.ctx, l.w, s, 8, time.Now())
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

// unrun shows that no controller runs the rollout (msg, rollout.Unrun):
// on a terminal the table again, whose lease line says so; else a line.
func (l *liveTable) unrun(s rollout.State, msg string) {
	if l.tty {
		l.show(s)
		return
	}
	fmt.Fprintf(l.w, "%s  %s\n", time.Now().Format(time.DateTime), msg)
}

// done shows the final state; off a terminal, the table after the lines.
func (l *liveTable) done(s rollout.State) {
	// Shown even once the watch's context ended (a Ctrl-C, a deadline):
	// the final state is what the operator stopped to read.
	l.ctx = context.WithoutCancel(l.ctx)
	l.show(s)
	if !l.tty {
		fmt.Fprintln(l.w)
		rollout.Render(l.ctx, l.w, s, 0, time.Now())
	}
}
