package mqtt

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/otad/otad/tlsfiles"
)

// ErrConfig marks a bad [mqtt] configuration; the message names the key at fault.
var ErrConfig = errors.New("mqtt config")

// DefaultTopicPrefix is the docs/contract/mqtt.md topic prefix.
const DefaultTopicPrefix = "ota"

const defaultConnectTimeout = 10 * time.Second

// Config is the [mqtt] section of docs/contract/config.md plus the device identity.
type Config struct {
	Broker      string // mqtt://host:port or mqtts://host:port (also tcp://, ssl://, tls://)
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

func (c Config) logger() *slog.Logger {
	if c.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return c.Logger
}

// brokerURL maps the schemes docs/contract/config.md allows onto paho's and fills in the default port.
func brokerURL(raw string) (server string, useTLS bool, host string, err error) {
	if raw == "" {
		return "", false, "", configErr("mqtt.broker", "empty")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", false, "", configErr("mqtt.broker", "%q: %v", raw, err)
	}
	port := "1883"
	switch strings.ToLower(u.Scheme) {
	case "mqtt", "tcp":
	case "mqtts", "ssl", "tls":
		useTLS, port = true, "8883"
	default:
		return "", false, "", configErr("mqtt.broker", "%q: scheme %q, want mqtt, mqtts, tcp, ssl or tls", raw, u.Scheme)
	}
	if u.Hostname() == "" {
		return "", false, "", configErr("mqtt.broker", "%q: no host", raw)
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		return "", false, "", configErr("mqtt.broker", "%q: want scheme://host:port only", raw)
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

// clientOptions is what every client here shares: broker, TLS, credentials, timeouts.
func clientOptions(c Config, clientID string) (*paho.ClientOptions, error) {
	server, useTLS, host, err := brokerURL(c.Broker)
	if err != nil {
		return nil, err
	}
	if err := checkTopicPart("mqtt.topic_prefix", c.prefix()); err != nil {
		return nil, err
	}
	tc, err := tlsConfig(c, host)
	if err != nil {
		return nil, err
	}
	if !useTLS && (c.CAFile != "" || c.CertFile != "") {
		c.logger().Warn("mqtt: TLS files are ignored for a plain broker URL", "broker", c.Broker)
	}
	o := paho.NewClientOptions().
		AddBroker(server).
		SetClientID(clientID).
		SetProtocolVersion(4).
		SetConnectTimeout(c.connectTimeout()).
		SetWriteTimeout(c.connectTimeout()).
		SetKeepAlive(30 * time.Second).
		SetPingTimeout(10 * time.Second).
		SetMaxReconnectInterval(time.Minute).
		SetOrderMatters(true).
		SetCustomOpenConnectionFn(openLimited(nil))
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
