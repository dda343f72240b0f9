package operator

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/verify"
)

// passwordEnv supplies --password without putting it on the command line (ps shows that).
const passwordEnv = "OTACTL_MQTT_PASSWORD"

// brokerFlags are the connection flags publish and status share.
type brokerFlags struct {
	brokers                                   stringList
	prefix, ca, cert, key, username, password string
	fs                                        *flag.FlagSet // which were given: they win over the config file
}

func addBrokerFlags(fs *flag.FlagSet) *brokerFlags {
	b := &brokerFlags{fs: fs}
	fs.Var(&b.brokers, "broker", "broker URL: mqtt://host:port or mqtts://host:port (again for each node of a cluster: start at a random one, fail over to the others); default: the config file's brokers ($"+configEnv+" or ~/.config/otactl/config.toml)")
	fs.StringVar(&b.prefix, "prefix", mqtt.DefaultTopicPrefix, "topic prefix")
	fs.StringVar(&b.ca, "ca", "", "mqtts: CA certificate file to trust (default: system roots)")
	fs.StringVar(&b.cert, "cert", "", "mqtts: client certificate file (mTLS)")
	fs.StringVar(&b.key, "key", "", "mqtts: client key file (mTLS)")
	fs.StringVar(&b.username, "username", "", "MQTT username")
	fs.StringVar(&b.password, "password", "", "MQTT password (or $"+passwordEnv+")")
	return b
}

func (b *brokerFlags) config() (mqtt.Config, error) {
	if err := b.fromConfig(); err != nil {
		return mqtt.Config{}, err
	}
	if len(b.brokers) == 0 {
		return mqtt.Config{}, usagef("missing --broker (or brokers in $%s, ~/.config/otactl/config.toml)", configEnv)
	}
	if err := checkName("prefix", b.prefix); err != nil {
		return mqtt.Config{}, err
	}
	pw := b.password
	if pw == "" {
		pw = os.Getenv(passwordEnv)
	}
	cfg := mqtt.Config{Broker: b.brokers[0]}
	if len(b.brokers) > 1 {
		cfg = mqtt.Config{Brokers: b.brokers}
	}
	cfg.TopicPrefix = b.prefix
	cfg.CAFile, cfg.CertFile, cfg.KeyFile = b.ca, b.cert, b.key
	cfg.Username, cfg.Password = b.username, pw
	return cfg, nil
}

// publishOnEveryNode publishes retained through each broker of cfg: the
// nodes of a cluster that keeps retained messages per node (RabbitMQ) then
// all hold it (docs/brokers.md, clusters). One node taking it is enough;
// the others are named on stderr.
func publishOnEveryNode(ctx context.Context, cfg mqtt.Config, topic string, payload []byte, stderr io.Writer) error {
	brokers := cfg.BrokerList()
	if len(brokers) == 1 {
		return mqtt.PublishRetained(ctx, cfg, topic, payload)
	}
	var first error
	ok := 0
	for _, b := range brokers {
		if err := mqtt.PublishRetained(ctx, cfg.Named(b), topic, payload); err != nil {
			fmt.Fprintf(stderr, "not published through %s: %v\n", b, err)
			first = cmp.Or(first, err)
			continue
		}
		ok++
	}
	if ok == 0 {
		return first
	}
	return nil
}

// checkName refuses a device, group or prefix that devices could not
// have (mqtt.CheckName): a publish to it would reach no one.
func checkName(flagName, v string) error {
	if err := mqtt.CheckName(v); err != nil {
		return usagef("--%s: %v", flagName, err)
	}
	return nil
}

// publish makes an envelope a device's or group's desired state: retained, QoS 1 (docs/contract/mqtt.md).
// It first reads the target devices' statuses, to warn when the offer
// already ended there (for good, or retryable without --retry) or they
// would refuse it (wouldRefuse); --clear
// --group clears the desired topics of the group's devices too.
func publish(ctx context.Context, args []string, _, stderr io.Writer) error {
	fset := newFlagSet("publish", "--broker URL (--device ID | --group G) [flags] FILE ('-' reads stdin)", stderr)
	bf := addBrokerFlags(fset)
	device := fset.String("device", "", "publish to this device's desired topic")
	group := fset.String("group", "", "publish to this group's desired topic")
	clearOffer := fset.Bool("clear", false, "clear the retained offer (no FILE); with --group also every group member's own desired topic (a rollout's offers)")
	window := fset.Duration("window", 2*time.Second, "with --group: ask the group's devices to report within this long, to know its members; 0: retained statuses only")
	timeout := fset.Duration("timeout", 30*time.Second, "give up after this long")
	retry := fset.Bool("retry", false, "raise the envelope's attempt counter (unsigned): devices whose install of this offer ended retryable (download_failed, cancelled) start it again; a final ending stays")
	pos, err := parseFlags(fset, args)
	if err != nil {
		return err
	}
	cfg, err := bf.config()
	if err != nil {
		return err
	}
	topic, err := desiredTopic(mqtt.Topics{Prefix: cfg.TopicPrefix}, *device, *group)
	if err != nil {
		return err
	}
	if *timeout <= 0 {
		return usagef("--timeout %v: want a positive duration", *timeout)
	}
	if *window < 0 {
		return usagef("--window must not be negative")
	}

	payload, err := publishPayload(pos, *clearOffer, *retry)
	if err != nil {
		return err
	}

	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	t, err := openTarget(ctx, cfg, *device, *group, *window)
	if err != nil {
		return err
	}
	defer t.sess.Close()
	if *clearOffer {
		return clearTarget(ctx, cfg, t, topic, stderr)
	}
	statuses := t.statuses()
	for _, w := range alreadyEnded(payload, statuses, *retry) {
		fmt.Fprintln(stderr, w)
	}
	for _, w := range wouldRefuse(payload, statuses, time.Now()) {
		fmt.Fprintln(stderr, w)
	}
	if err := publishOnEveryNode(ctx, cfg, topic, payload, stderr); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "published %d bytes to %s (retained, QoS 1)\n", len(payload), topic)
	return nil
}

// desiredTopic is the retained desired topic of exactly one device or group.
func desiredTopic(topics mqtt.Topics, device, group string) (string, error) {
	switch {
	case (device == "") == (group == ""):
		return "", usagef("want exactly one of --device and --group")
	case device != "":
		if err := checkName("device", device); err != nil {
			return "", err
		}
		topics.Device = device
		return topics.Desired(), nil
	default:
		if err := checkName("group", group); err != nil {
			return "", err
		}
		return topics.Group(group), nil
	}
}

// publishPayload is what publish writes: the envelope FILE, checked as a
// device would, with its attempt raised for --retry; empty for --clear.
func publishPayload(pos []string, clearOffer, retry bool) ([]byte, error) {
	switch {
	case clearOffer && len(pos) != 0:
		return nil, usagef("--clear takes no FILE, got %q", pos)
	case clearOffer:
		return nil, nil // empty clears the retained message
	case len(pos) != 1:
		return nil, usagef("want exactly one envelope FILE, got %d arguments", len(pos))
	}
	payload, err := verify.ReadEnvelopeFile(pos[0])
	if err != nil {
		return nil, err
	}
	// Devices would refuse it anyway; refuse here so a wrong file never becomes the
	// retained desired state of a fleet.
	if _, err := verify.ParseEnvelope(payload); err != nil {
		return nil, fmt.Errorf("%s: %w", pos[0], err)
	}
	if retry {
		// The time in seconds: each retry's counter is greater than the last.
		if payload, err = verify.WithAttempt(payload, time.Now().Unix()); err != nil {
			return nil, fmt.Errorf("%s: %w", pos[0], err)
		}
	}
	return payload, nil
}
