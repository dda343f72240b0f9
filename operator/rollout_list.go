package operator

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/rollout"
)

// rolloutList prints every rollout whose state the broker retains, a line
// each (docs/contract/rollouts.md).
func rolloutList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("rollout list", "--broker URL [--json]", stderr)
	bf := addBrokerFlags(fs)
	of := addOperatorFlags(fs, false)
	asJSON := fs.Bool("json", false, "print the rollouts as a JSON array: name, and the state as retained or the error decoding it")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usagef("unexpected arguments %q", pos)
	}
	cfg, err := bf.config()
	if err != nil {
		return err
	}
	trust, _, err := of.load(false)
	if err != nil {
		return err
	}
	filter := mqtt.Topics{Prefix: cfg.TopicPrefix}.RolloutState("+")
	prefix, _ := strings.CutSuffix(filter, "+/state")
	var (
		mu       sync.Mutex
		states   = map[string][]byte{}
		tooLarge = map[string]error{} // topic → why its state was dropped unread
	)
	sess, err := mqtt.Open(ctx, cfg, map[string]byte{filter: 1}, func(m mqtt.Message) {
		mu.Lock()
		states[m.Topic] = m.Payload
		if err := m.TooLarge("state of rollout " + strings.TrimSuffix(strings.TrimPrefix(m.Topic, prefix), "/state")); err != nil {
			tooLarge[m.Topic] = err // listed as undecodable: an empty payload here is no clearing
		} else {
			delete(tooLarge, m.Topic)
		}
		mu.Unlock()
	})
	if err != nil {
		return err
	}
	defer sess.Close()
	if err := sess.Sync(ctx); err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	list := retainedRollouts(trust, prefix, states, tooLarge)
	if len(list) == 0 {
		fmt.Fprintf(stderr, "no rollout state retained under %s (a broker that delivers no retained message to a wildcard subscription, as RabbitMQ, lists none: ask for one with otactl rollout status NAME)\n", filter)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(append([]listedRollout{}, list...)) // [] rather than null for none
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ROLLOUT\tSTATE\tWAVE\tGROUP\tOFFER\tDEVICES\tOUTCOMES\tFAILED\tPENDING\tUPDATED")
	for _, l := range list {
		s := l.State
		if s == nil {
			fmt.Fprintf(tw, "%s\t(bad state: %s)\t-\t-\t-\t-\t-\t-\t-\t-\n", clean(l.Name), l.Error)
			continue
		}
		c := s.Counts
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", clean(l.Name), clean(s.Phase), s.Wave, s.WaveCount, clean(s.Group),
			clean(s.Offer.ID), c.Devices, c.Outcomes(), c.Bad(), c.Pending, s.Updated.Local().Format(time.DateTime))
	}
	return tw.Flush()
}

// retainedRollouts is the rollouts of the retained states (topic → payload), those
// too large to read (topic → why) among them, in topic order; cleared
// ones are left out.
func retainedRollouts(trust rollout.Trust, prefix string, states map[string][]byte, tooLarge map[string]error) []listedRollout {
	var list []listedRollout
	for _, topic := range slices.Sorted(maps.Keys(states)) {
		tooBig := tooLarge[topic]
		if len(states[topic]) == 0 && tooBig == nil {
			continue // cleared
		}
		l := listedRollout{Name: strings.TrimSuffix(strings.TrimPrefix(topic, prefix), "/state")}
		s, _, err := trust.OpenState(topic, states[topic])
		if tooBig != nil {
			err = tooBig
		}
		if err != nil {
			l.Error = err.Error() // a forged one too: listed, said so, never its state
		} else {
			l.State = &s
		}
		list = append(list, l)
	}
	return list
}

// listedRollout is one line of `rollout list`, one element of its --json.
type listedRollout struct {
	Name  string         `json:"name"`
	State *rollout.State `json:"state,omitempty"`
	Error string         `json:"error,omitempty"` // why the retained state does not decode
}

// clean keeps what came from the broker from breaking a table or the terminal.
func clean(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, s)
}
