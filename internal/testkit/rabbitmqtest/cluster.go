package rabbitmqtest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
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
// (rabbitmqctl join_cluster, in parallel) and mirrors the session queues.
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
	if err := each(n-1, func(i int) error { return cl.Nodes[i+1].join(first) }); err != nil {
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
	p := b.proc.Load()
	for _, args := range [][]string{{"stop_app"}, {"join_cluster", first.Node}, {"start_app"}} {
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
// over), or -1.
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
