package rabbitmqtest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Cluster is RabbitMQ nodes of one cluster on this machine, each a node of
// the test's own (Start), sharing an Erlang cookie. The MQTT plugin's
// session queues are mirrored on every node (a classic mirrored queue
// policy, ha-mode all): without it a device whose queue lived on a lost
// node cannot subscribe on any other until that node returns (tested in
// TestCluster; docs/brokers.md, clusters).
type Cluster struct {
	Nodes []*Broker
}

// StartCluster starts n nodes in parallel, joins the others to the first
// (rabbitmqctl join_cluster, one at a time) and mirrors the session queues.
// Nodes are stopped when the test ends. It takes 20 to 40 s.
func StartCluster(t testing.TB, n int, opts Options) *Cluster {
	t.Helper()
	var c [16]byte
	_, _ = rand.Read(c[:])
	cookie := "OTADTEST" + hex.EncodeToString(c[:])
	cl := &Cluster{Nodes: make([]*Broker, n)}
	start := time.Now()
	if err := each(n, func(i int) (err error) {
		cl.Nodes[i], err = startNode(t, opts, cookie)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	first := cl.Nodes[0]
	up := time.Since(start)
	// One at a time: two nodes joining at once can abort each other's schema
	// copy (mnesia's schema_prepare, seen in make test).
	for _, b := range cl.Nodes[1:] {
		if err := b.join(first); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.wholeRegistry(t); err != nil {
		t.Fatal(err)
	}
	t.Logf("rabbitmq cluster of %d nodes: up in %v, joined in %v more", n, up.Round(time.Millisecond), (time.Since(start) - up).Round(time.Millisecond))
	if _, err := first.Ctl("set_policy", "--apply-to", "queues", "otad-mqtt-sessions", "^mqtt-subscription-",
		`{"ha-mode":"all","ha-sync-mode":"automatic"}`); err != nil {
		t.Fatal(err)
	}
	return cl
}

// each runs fn(0) … fn(n-1) at once and returns their errors joined.
func each(n int, fn func(i int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = fn(i) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// join makes b a member of first's cluster and waits until its MQTT
// listener is up again.
func (b *Broker) join(first *Broker) error {
	return b.ctlThenListen([]string{"stop_app"}, []string{"join_cluster", first.Node}, []string{"start_app"})
}

// ctlThenListen runs rabbitmqctl commands in turn against b, then waits
// until its MQTT listener is up again.
func (b *Broker) ctlThenListen(cmds ...[]string) error {
	p := b.proc.Load()
	for _, args := range cmds {
		if _, err := b.Ctl(args...); err != nil {
			return fmt.Errorf("node %s: %w", b.Node, err)
		}
	}
	return p.waitListener(b.Port, 2, b.log)
}

// URLs are the nodes' MQTT URLs.
func (c *Cluster) URLs() []string {
	out := make([]string, len(c.Nodes))
	for i, b := range c.Nodes {
		out[i] = b.URL
	}
	return out
}

// Running lists the nodes a cluster member sees running.
func (c *Cluster) Running(i int) (string, error) {
	return c.Nodes[i].Ctl("eval", "rabbit_nodes:all_running().")
}

// NodeOf is the index of the running node that accepted clientID last, as
// the nodes' logs say (a later connection elsewhere takes the client ID
// over), or -1. The logs are read as RabbitMQ writes them, so they can lag
// the connection itself by seconds on a loaded machine: NodeWithin waits.
func (c *Cluster) NodeOf(clientID string) int {
	best, at := -1, time.Time{}
	for i, b := range c.Nodes {
		p := b.proc.Load()
		if p == nil {
			continue
		}
		if t := p.conns.at(clientID); t.After(at) {
			best, at = i, t
		}
	}
	return best
}

// NodeWithin asks NodeOf until ok accepts its answer or d has passed, and
// returns the last answer.
func (c *Cluster) NodeWithin(clientID string, d time.Duration, ok func(int) bool) int {
	end := time.Now().Add(d)
	for {
		i := c.NodeOf(clientID)
		if ok(i) || time.Now().After(end) {
			return i
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// wholeRegistry waits until every node is a member of the MQTT plugin's
// client-ID registry (a Ra cluster, mqtt_node), restarting the app of a
// node still left out after 10 s. Nodes that start the plugin at once may
// not all be added to it; then a lost member can take the registry's
// majority with it, and no client connects anywhere until it returns.
func (c *Cluster) wholeRegistry(t testing.TB) error {
	start, restarted := time.Now(), false
	for {
		missing, err := c.outOfRegistry()
		if err == nil && len(missing) == 0 {
			return nil
		}
		switch {
		case time.Since(start) > 90*time.Second:
			if err != nil {
				return fmt.Errorf("mqtt client-ID registry: %w", err)
			}
			return fmt.Errorf("mqtt client-ID registry: nodes %v are not members after %v", missing, time.Since(start).Round(time.Second))
		case err == nil && !restarted && time.Since(start) > 10*time.Second:
			restarted = true
			for _, b := range missing {
				t.Logf("rabbitmq node %s is not in the mqtt client-ID registry: restarting its app", b.Node)
				if err := b.ctlThenListen([]string{"stop_app"}, []string{"start_app"}); err != nil {
					return err
				}
			}
		}
		time.Sleep(time.Second)
	}
}

// outOfRegistry are the nodes the first one's client-ID registry lacks.
func (c *Cluster) outOfRegistry() ([]*Broker, error) {
	members, err := c.Nodes[0].registryMembers()
	if err != nil {
		return nil, err
	}
	var out []*Broker
	for _, b := range c.Nodes {
		if !slices.Contains(members, b.Node) {
			out = append(out, b)
		}
	}
	return out, nil
}

var quotedAtom = regexp.MustCompile(`'([^']+)'`)

// registryMembers are the nodes of the client-ID registry as b sees them.
func (b *Broker) registryMembers() ([]string, error) {
	out, err := b.Ctl("eval", "ra:members({mqtt_node, node()}).")
	if err != nil {
		return nil, err
	}
	nodes, err := parseMembers(out)
	if err != nil {
		return nil, fmt.Errorf("node %s: ra:members: %w", b.Node, err)
	}
	return nodes, nil
}

// parseMembers reads ra:members' answer, {ok,[{mqtt_node,'a@localhost'},…],
// {mqtt_node,'a@localhost'}}: the members, then the leader.
func parseMembers(out string) ([]string, error) {
	out = strings.TrimSpace(out)
	i, j := strings.Index(out, "["), strings.Index(out, "]")
	if !strings.HasPrefix(out, "{ok,") || i < 0 || j < i {
		return nil, fmt.Errorf("not a member list: %q", out)
	}
	var nodes []string
	for _, m := range quotedAtom.FindAllStringSubmatch(out[i:j], -1) {
		nodes = append(nodes, m[1])
	}
	return nodes, nil
}
