package operator

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/internal/testkit/rabbitmqtest"
	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/rollout"
	"github.com/otad/otad/rollout/controller"
	"github.com/otad/otad/sim/fleet"
)

// A rollout on a 3-node RabbitMQ cluster: simulated devices spread over the
// nodes (each starts at a random one), the controller given every node;
// the node the controller is connected to is killed while wave 2 installs.
// Devices and controller fail over to the other nodes; the rollout
// finishes, or (two devices of wave 2 failing their health check) halts
// and, started again, stays halted. Nothing is offered outside the waves,
// and every device offered downloads once.
func TestRolloutOnCluster(t *testing.T) {
	c := rabbitmqtest.StartCluster(t, 3, rabbitmqtest.Options{})
	const n = 40
	for _, tc := range []struct {
		name  string
		halts bool
	}{
		{"finishes", false},
		{"halts", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name, prefix := "cluster-"+tc.name, tc.name[:1]+"-"
			var fail []string
			if tc.halts {
				// The 10% wave's two devices, as the controller will choose
				// them (the canaries are the first two devices).
				ids := make([]string, n)
				for i := range ids {
					ids[i] = fleet.ID(prefix, i+1)
				}
				p := &rollout.Plan{Name: name, Waves: []rollout.Wave{{Devices: ids[:2]}, {Percent: 10}, {Percent: 100}}}
				fail = rollout.Assign(p, ids)[1]
			}
			r := startFleetOn(t, c.URLs(), name, prefix, n, 0, fail)
			r.waitUp(t)
			states := recordStatesOn(t, c.URLs(), name)
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			ended := make(chan result, 1)
			go func() { ended <- r.controller(ctx, "--lease", "20s") }()
			waitStates(t, states, name, "wave 2 offered", func(s rollout.State) bool {
				return s.Wave == 2 && s.Counts.Devices > 2 && s.Counts.Pending > 0
			})
			// The controller connects as its client ID once its claim is
			// read back; a node's log says so a little later still.
			node := c.NodeWithin(controller.ClientID(mqtt.DefaultTopicPrefix, name), 20*time.Second, func(i int) bool { return i >= 0 })
			if node < 0 {
				t.Fatal("no node's log says it accepted the controller in 20s")
			}
			t.Logf("killing node %d (%s), the controller's", node, c.Nodes[node].Node)
			c.Nodes[node].Kill()
			// The next run needs the cluster whole (the MQTT plugin's client
			// IDs live in a Raft cluster that wants a majority).
			defer c.Nodes[node].Restart()
			var res result
			select {
			case res = <-ended:
			case <-ctx.Done():
				// Its stderr says where it was stuck (the ctx ended stops it).
				select {
				case res = <-ended:
				case <-time.After(30 * time.Second):
				}
				last := "none"
				if ss := states.of(name); len(ss) > 0 {
					last = fmt.Sprintf("%s in wave %d %+v", ss[len(ss)-1].Phase, ss[len(ss)-1].Wave, ss[len(ss)-1].Counts)
				}
				t.Fatalf("the controller did not end in 4 minutes; last state seen: %s\n%s", last, tail(res.stderr))
			}
			cfg := mqtt.Config{Brokers: c.URLs()}
			_, s, err := controller.ReadState(context.Background(), cfg, testOperator.trust, name)
			if err != nil {
				t.Fatal(err)
			}
			want, code := rollout.PhaseFinished, ota.ExitOK
			if tc.halts {
				want, code = rollout.PhaseHalted, ota.ExitFailure
			}
			if res.code != code || s.Phase != want || (tc.halts && s.Wave != 2) || (!tc.halts && s.Counts.Success != n) {
				t.Fatalf("exit %d, %s in wave %d %+v; want %s\n%s", res.code, s.Phase, s.Wave, s.Counts, want, tail(res.stderr))
			}
			if !strings.Contains(res.stderr, "mqtt session: reconnected") {
				t.Errorf("the controller did not fail over:\n%s", tail(res.stderr))
			}
			if tc.halts {
				_, before := r.counts()
				again := r.controller(context.Background(), "--lease", "20s")
				_, after := r.counts()
				if again.code != ota.ExitFailure || !strings.Contains(again.stderr, "from its retained state: halted") || sum(after) != sum(before) {
					t.Fatalf("started again: exit %d, %d more offers\n%s", again.code, sum(after)-sum(before), tail(again.stderr))
				}
			}
			offered := slices.Concat(r.members(s)...)
			r.waitDevices(t, "the offered devices' outcomes", offered, func(st ota.Status) bool {
				return rollout.OutcomeOf(st, s.Offer).Ended() && st.State == ota.Idle
			})
			gets, offers := r.counts()
			for d := range offers {
				if !slices.Contains(offered, d) {
					t.Errorf("%s of no offered wave received the offer", d)
				}
			}
			for _, d := range offered {
				if gets[d] != 1 {
					t.Errorf("%s: %d downloads", d, gets[d])
				}
			}
			if len(gets) != len(offered) {
				t.Errorf("%d devices downloaded, %d were offered", len(gets), len(offered))
			}
		})
	}
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// recordStatesOn records name's states as each broker delivers them live:
// on a cluster, a state goes to every node's subscribers, whichever node
// it was published on.
func recordStatesOn(t *testing.T, urls []string, name string) *stateLog {
	t.Helper()
	l := &stateLog{states: map[string][]rollout.State{}}
	for i, u := range urls {
		sess, err := mqtt.Open(context.Background(), mqtt.Config{Broker: u, DeviceID: fmt.Sprintf("state-log-%s-%d", name, i)},
			map[string]byte{mqtt.Topics{}.RolloutState(name): 1}, func(m mqtt.Message) {
				s, err := openState(m.Topic, m.Payload)
				if err != nil {
					return
				}
				l.mu.Lock()
				if ss := l.states[name]; len(ss) == 0 || s.Newer(ss[len(ss)-1]) {
					l.states[name] = append(ss, s)
				}
				l.mu.Unlock()
			})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(sess.Close)
	}
	return l
}
