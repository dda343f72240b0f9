package rabbitmqtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/internal/testkit/testtool"
)

// binDir holds the real scripts: /usr/sbin's wrappers switch to the rabbitmq
// user and its /var/lib/rabbitmq, which a test must not use.
const binDir = "/usr/lib/rabbitmq/bin"

// Options configure the node.
type Options struct {
	// SubscriptionTTL is mqtt.subscription_ttl: how long the queue of a
	// disconnected persistent MQTT client lives (x-expires). 0 keeps
	// RabbitMQ's default (24 h in 3.10).
	SubscriptionTTL time.Duration
}

// Broker is a running (or stopped) RabbitMQ node with the MQTT plugin.
type Broker struct {
	URL  string // mqtt://127.0.0.1:PORT
	Port int    // the MQTT listener
	Dir  string
	Node string // otadtest-<hex>@localhost

	t    testing.TB
	env  []string
	log  *testtool.Buffer
	proc atomic.Pointer[node] // nil when stopped
}

// Start runs a node for the test and stops it in t.Cleanup (its log is
// printed if the test failed). Startup takes several seconds.
func Start(t testing.TB, opts Options) *Broker {
	t.Helper()
	b, err := startNode(t, opts, "")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// startNode starts a node with cookie as its Erlang cookie ("": its own),
// trying fresh ports when one is taken before the node binds it.
func startNode(t testing.TB, opts Options, cookie string) (*Broker, error) {
	testtool.Require(t, "rabbitmqctl", "rabbitmq-server")
	testtool.Require(t, "epmd", "erlang-base")
	for attempt := 1; ; attempt++ {
		b, err := newBroker(t.TempDir(), opts)
		if err != nil {
			return nil, err
		}
		b.t = t
		if cookie != "" {
			if err := os.WriteFile(filepath.Join(b.Dir, "home", ".erlang.cookie"), []byte(cookie), 0o400); err != nil {
				return nil, fmt.Errorf("rabbitmq cookie: %w", err)
			}
		}
		err = b.start()
		if err == nil {
			testtool.StopAtEnd(t, "rabbitmq ("+b.URL+", node "+b.Node+", last 64 KiB)", b.Stop, b.log.String)
			return b, nil
		}
		// The ports were free a moment ago; a parallel test's listener can
		// take one before the node binds it (eaddrinuse): fresh ports again.
		if attempt == startAttempts {
			return nil, fmt.Errorf("rabbitmq did not start in %d attempts: %w\n%s", attempt, err, b.log.String())
		}
		t.Logf("rabbitmq start attempt %d failed, trying new ports: %v", attempt, err)
	}
}

// startAttempts bounds Start's tries with fresh ports.
const startAttempts = 3

// newBroker writes the node's files; it starts nothing.
func newBroker(dir string, opts Options) (*Broker, error) {
	var ports [3]int // MQTT, AMQP, Erlang distribution
	for i := range ports {
		p, err := mosquittotest.Port()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	var id [4]byte
	_, _ = rand.Read(id[:])
	b := &Broker{Port: ports[0], Dir: dir, Node: "otadtest-" + hex.EncodeToString(id[:]) + "@localhost",
		log: &testtool.Buffer{Max: 64 << 10}}
	b.URL = fmt.Sprintf("mqtt://127.0.0.1:%d", b.Port)
	conf := []string{
		fmt.Sprintf("listeners.tcp.default = 127.0.0.1:%d", ports[1]),
		fmt.Sprintf("mqtt.listeners.tcp.default = 127.0.0.1:%d", ports[0]),
		"mqtt.allow_anonymous = true",
		"loopback_users = none",
		"log.console = true",
		"log.console.level = info",
		"log.file = false",
	}
	if opts.SubscriptionTTL > 0 {
		conf = append(conf, fmt.Sprintf("mqtt.subscription_ttl = %d", opts.SubscriptionTTL.Milliseconds()))
	}
	files := map[string]string{
		"rabbitmq.conf":     strings.Join(conf, "\n") + "\n",
		"enabled_plugins":   "[rabbitmq_mqtt].\n",
		"rabbitmq-env.conf": "", // instead of /etc/rabbitmq/rabbitmq-env.conf
	}
	for _, sub := range []string{"home", "mnesia", "log"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			return nil, fmt.Errorf("rabbitmq dir: %w", err)
		}
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			return nil, fmt.Errorf("rabbitmq %s: %w", name, err)
		}
	}
	b.env = append(os.Environ(),
		"HOME="+filepath.Join(dir, "home"), // the Erlang cookie
		"RABBITMQ_BASE="+dir,
		"RABBITMQ_MNESIA_BASE="+filepath.Join(dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(dir, "log"),
		"RABBITMQ_NODENAME="+b.Node,
		fmt.Sprintf("RABBITMQ_NODE_PORT=%d", ports[1]),
		fmt.Sprintf("RABBITMQ_DIST_PORT=%d", ports[2]),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(dir, "rabbitmq.conf"),
		"RABBITMQ_ADVANCED_CONFIG_FILE="+filepath.Join(dir, "advanced.config"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(dir, "enabled_plugins"),
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(dir, "rabbitmq-env.conf"),
		"RABBITMQ_LOGS=-",
	)
	return b, nil
}

func (b *Broker) start() error {
	p, err := launch(filepath.Join(binDir, "rabbitmq-server"), b.Dir, b.env, b.Port, b.log)
	if err == nil {
		b.proc.Store(p)
	}
	return err
}

// Stop stops the node gracefully (rabbitmqctl stop: it keeps its durable
// queues and retained messages for Restart), and kills what is left of its
// process group; a no-op when stopped.
func (b *Broker) Stop() {
	p := b.proc.Swap(nil)
	if p == nil {
		return
	}
	if _, err := b.Ctl("stop"); err != nil {
		b.log.Write([]byte("rabbitmqctl stop: " + err.Error() + "\n"))
	}
	p.stop()
}

// Kill ends the node at once (SIGKILL to its process group), as a machine
// lost: no goodbye to its clients or its cluster; a no-op when stopped.
func (b *Broker) Kill() {
	if p := b.proc.Swap(nil); p != nil {
		p.kill()
	}
}

// Restart stops the node if it runs and starts it again on the same ports
// with the same data.
func (b *Broker) Restart() {
	b.t.Helper()
	b.Stop()
	if err := b.start(); err != nil {
		b.t.Fatal(err)
	}
}

// Ctl runs rabbitmqctl against the node and returns its output.
func (b *Broker) Ctl(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "rabbitmqctl"), append([]string{"-n", b.Node}, args...)...)
	cmd.Env, cmd.Dir = b.env, b.Dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("rabbitmqctl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// Queue is one queue of the node's default vhost.
type Queue struct {
	Name      string
	Durable   bool
	Arguments map[string]any // x-expires …
}

// Queues lists the node's queues (an MQTT client's subscriptions live in
// mqtt-subscription-<client ID>qos0/qos1).
func (b *Broker) Queues() ([]Queue, error) {
	out, err := b.Ctl("list_queues", "name", "durable", "arguments", "--formatter", "json", "--quiet")
	if err != nil {
		return nil, err
	}
	var rows []struct {
		Name      string  `json:"name"`
		Durable   bool    `json:"durable"`
		Arguments [][]any `json:"arguments"` // [name, type, value]
	}
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		return nil, fmt.Errorf("rabbitmqctl list_queues: %w: %s", err, out)
	}
	qs := make([]Queue, len(rows))
	for i, r := range rows {
		qs[i] = Queue{Name: r.Name, Durable: r.Durable, Arguments: map[string]any{}}
		for _, a := range r.Arguments {
			if name, ok := a[0].(string); ok && len(a) == 3 {
				qs[i].Arguments[name] = a[2]
			}
		}
	}
	return qs, nil
}

// Address is the broker's URL (brokertest.Broker).
func (b *Broker) Address() string { return b.URL }

// Log returns the node's log so far (its last 64 KiB).
func (b *Broker) Log() string { return b.log.String() }
