package mqtt

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"net/url"
	"strings"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/otad/otad/ota"
	"github.com/otad/otad/tlsfiles"
)

// ErrConfig marks a bad [mqtt] configuration; the message names the key at fault.
var ErrConfig = errors.New("mqtt config")

// DefaultTopicPrefix is the docs/contract/mqtt.md topic prefix.
const DefaultTopicPrefix = "ota"

const defaultConnectTimeout = 10 * time.Second

// Config is the [mqtt] section of docs/contract/config.md plus the device identity.
type Config struct {
	Broker string // mqtt://host:port or mqtts://host:port (also tcp://, ssl://, tls://)
	// Brokers are the nodes of one clustered broker, instead of Broker: a
	// client starts at a random one and fails over to the others when its
	// connection is lost (docs/contract/mqtt.md).
	Brokers     []string
	TopicPrefix string // default "ota"
	DeviceID    string // client ID and topic component
	Groups      []string
	// mqtts: CA to trust (empty: the system pool); client cert/key for mTLS.
	CAFile, CertFile, KeyFile string
	Username, Password        string
	Logger                    *slog.Logger
	ConnectTimeout            time.Duration // per attempt; default 10s
	Reconnect                 Backoff       // the device's reconnects; zero: 5s doubling to 2m
	// OnOversized, if set, is told of each desired-topic message dropped
	// unread for being over ota.MaxEnvelopeSize (from paho's goroutine; must not block).
	OnOversized func(topic string, size int)
	// OnRoot, if set, subscribes to the retained root of trust of the
	// fleet and of each group (docs/contract/trust.md) and is handed each
	// message, from paho's goroutine; it must not block.
	OnRoot func(topic string, payload []byte)
}

func configErr(key, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrConfig, key, fmt.Sprintf(format, args...))
}

func (c Config) prefix() string {
	if c.TopicPrefix == "" {
		return DefaultTopicPrefix
	}
	return c.TopicPrefix
}

func (c Config) connectTimeout() time.Duration {
	if c.ConnectTimeout <= 0 {
		return defaultConnectTimeout
	}
	return c.ConnectTimeout
}

// attemptTimeout bounds one connect: paho tries each broker in turn.
func (c Config) attemptTimeout() time.Duration {
	return time.Duration(max(1, len(c.BrokerList())))*c.connectTimeout() + 5*time.Second
}

func (c Config) logger() *slog.Logger {
	if c.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return c.Logger
}

// BrokerList is the brokers to connect to: Brokers, or Broker alone.
func (c Config) BrokerList() []string {
	if len(c.Brokers) > 0 {
		return c.Brokers
	}
	if c.Broker == "" {
		return nil
	}
	return []string{c.Broker}
}

// Named is the config for one broker of the list (a client pinned to one
// node).
func (c Config) Named(broker string) Config {
	c.Broker, c.Brokers = broker, nil
	return c
}

// Describe names the brokers for logs and messages.
func (c Config) Describe() string { return strings.Join(c.BrokerList(), ",") }

// servers checks every broker URL of the config and returns paho's form of
// each, in a random order: a fleet's clients spread over a cluster's nodes,
// and each fails over to the next in its order. All must agree on TLS.
func (c Config) servers() (servers []string, useTLS bool, err error) {
	list := c.BrokerList()
	key := func(i int) string {
		if len(c.Brokers) > 0 {
			return fmt.Sprintf("mqtt.brokers[%d]", i)
		}
		return "mqtt.broker"
	}
	if len(list) == 0 {
		return nil, false, configErr("mqtt.broker", "empty")
	}
	if c.Broker != "" && len(c.Brokers) > 0 {
		return nil, false, configErr("mqtt.brokers", "set with mqtt.broker too; give one or the other")
	}
	for i, raw := range list {
		server, tls, _, err := brokerURL(key(i), raw)
		if err != nil {
			return nil, false, err
		}
		if i > 0 && tls != useTLS {
			return nil, false, configErr(key(i), "%q: mixes mqtt:// and mqtts:// with %q", raw, list[0])
		}
		useTLS = tls
		servers = append(servers, server)
	}
	mrand.Shuffle(len(servers), func(i, j int) { servers[i], servers[j] = servers[j], servers[i] })
	return servers, useTLS, nil
}

// brokerURL maps the schemes docs/contract/config.md allows onto paho's and fills in the default port.
func brokerURL(key, raw string) (server string, useTLS bool, host string, err error) {
	if raw == "" {
		return "", false, "", configErr(key, "empty")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", false, "", configErr(key, "%q: %v", raw, err)
	}
	port := "1883"
	switch strings.ToLower(u.Scheme) {
	case "mqtt", "tcp":
	case "mqtts", "ssl", "tls":
		useTLS, port = true, "8883"
	default:
		return "", false, "", configErr(key, "%q: scheme %q, want mqtt, mqtts, tcp, ssl or tls", raw, u.Scheme)
	}
	if u.Hostname() == "" {
		return "", false, "", configErr(key, "%q: no host", raw)
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		return "", false, "", configErr(key, "%q: want scheme://host:port only", raw)
	}
	if p := u.Port(); p != "" {
		port = p
	}
	scheme := "tcp"
	if useTLS {
		scheme = "ssl"
	}
	return scheme + "://" + net.JoinHostPort(u.Hostname(), port), useTLS, u.Hostname(), nil
}

// tlsConfig loads the CA and client certificate; errors name the key and file.
func tlsConfig(c Config, serverName string) (*tls.Config, error) {
	tc, err := tlsfiles.Files{Section: "mqtt", CAFile: c.CAFile, CertFile: c.CertFile, KeyFile: c.KeyFile}.Config(serverName)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return tc, nil
}

// clientOptions is what every client here shares: brokers, TLS, credentials,
// timeouts. paho tries the brokers in order on each connect; the caller
// sets how inbound messages are bounded (SetCustomOpenConnectionFn with
// openLimited).
func clientOptions(c Config, clientID string) (*paho.ClientOptions, error) {
	servers, useTLS, err := c.servers()
	if err != nil {
		return nil, err
	}
	if err := checkTopicPart("mqtt.topic_prefix", c.prefix()); err != nil {
		return nil, err
	}
	// The server name is each broker's host, set per connection (openLimited).
	tc, err := tlsConfig(c, "")
	if err != nil {
		return nil, err
	}
	if !useTLS && (c.CAFile != "" || c.CertFile != "") {
		c.logger().Warn("mqtt: TLS files are ignored for a plain broker URL", "broker", c.Describe())
	}
	o := paho.NewClientOptions()
	for _, s := range servers {
		o.AddBroker(s)
	}
	o.SetClientID(clientID).
		SetProtocolVersion(4).
		SetConnectTimeout(c.connectTimeout()).
		SetWriteTimeout(c.connectTimeout()).
		SetKeepAlive(30 * time.Second).
		SetPingTimeout(10 * time.Second).
		SetMaxReconnectInterval(time.Minute).
		SetOrderMatters(true).
		SetCustomOpenConnectionFn(openLimited(ota.MaxEnvelopeSize, nil))
	if useTLS {
		o.SetTLSConfig(tc)
	}
	if c.Username != "" {
		o.SetUsername(c.Username)
		o.SetPassword(c.Password)
	}
	return o, nil
}

// randomClientID names operator clients, which have no identity of their own.
func randomClientID() string {
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return "otactl-" + hex.EncodeToString(b[:])
}
