package operator

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/operator/dashboard"
	"github.com/otad/otad/rollout"
)

// dashboardCmd serves the fleet dashboard (docs/operating.md) until
// interrupted.
func dashboardCmd(ctx context.Context, args []string, _, stderr io.Writer) error {
	fs := newFlagSet("dashboard", "--broker URL [--listen 127.0.0.1:8080] [--tls-cert FILE --tls-key FILE --token-file FILE] [flags]", stderr)
	bf := addBrokerFlags(fs)
	of := addOperatorFlags(fs, true)
	of.addStateDir()
	acc := &dashboard.Access{}
	fs.StringVar(&acc.Listen, "listen", "127.0.0.1:8080", "address to serve the page on; one that is not loopback needs --tls-cert, --tls-key and --token-file")
	fs.StringVar(&acc.TLSCert, "tls-cert", "", "serve HTTPS with this certificate (PEM)")
	fs.StringVar(&acc.TLSKey, "tls-key", "", "the certificate's key (PEM)")
	fs.StringVar(&acc.TokenFile, "token-file", "", "require the token in this file (at least 16 characters, mode 0600): open the page as /?token=TOKEN; with it the rollout pages offer pause, resume and abort")
	window := fs.Duration("window", 3*time.Second, "ask the devices to report within this long when starting and after a reconnect; 0: retained statuses only")
	queue := fs.Int("broker-queue", rollout.DefaultBrokerQueue, "the messages the broker queues for one client before it drops (Mosquitto's max_queued_messages, EMQX's mqtt.max_mqueue_len; 0: no limit, as RabbitMQ): the view says when answers came faster than it lets through (docs/brokers.md)")
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
	if *window < 0 || *queue < 0 {
		return usagef("--window and --broker-queue must not be negative")
	}
	if err := acc.Check(); err != nil {
		return usagef("%v", err)
	}
	trust, key, err := of.load(false)
	if err != nil {
		return err
	}
	if of.key != "" || of.insecure {
		if _, key, err = of.load(true); err != nil {
			return err
		}
	}
	counters, err := of.counters()
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// The page's pause, resume and abort are otactl's (behind the token),
	// signed with the operator key as the CLI's are; without one the page
	// offers none.
	var command func(ctx context.Context, sess *mqtt.Session, name string, op rollout.Op, reason string) error
	if key != nil || of.insecure {
		command = func(ctx context.Context, sess *mqtt.Session, name string, op rollout.Op, reason string) error {
			_, err := publishCommand(ctx, cfg, sess, key, name, rollout.NewCommand(op, reason, "dashboard", time.Now()))
			return err
		}
	}
	return dashboard.Run(ctx, dashboard.Options{Broker: cfg, Access: acc, Window: *window, BrokerQueue: *queue, Log: log, Trust: trust, Command: command, Counters: counters}, func(url string) {
		fmt.Fprintf(stderr, "dashboard of the fleet on %s: %s (Ctrl-C ends)\n", cfg.Broker, url)
	})
}
