package demo

import (
	"context"
	"fmt"
	"github.com/otad/otad/rollout"
	"github.com/otad/otad/verify"
	"log/slog"
	"time"

	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/operator/dashboard"
)

// startDashboard serves `otactl dashboard` of the demo's broker on a free
// loopback port until ctx ends, and says where; stop waits for it to end.
func (d *run) startDashboard(ctx context.Context) (stop func(), err error) {
	acc := &dashboard.Access{Listen: "127.0.0.1:0"}
	if err := acc.Check(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	urls := make(chan string, 1)
	done := make(chan error, 1)
	log := slog.New(slog.DiscardHandler)
	op, err := verify.LoadKeyFile(d.opPub)
	if err != nil {
		cancel()
		return nil, err
	}
	trust := rollout.Trust{Keys: verify.NewKeyring(op)}
	go func() {
		done <- dashboard.Run(ctx, dashboard.Options{Broker: mqtt.Config{Broker: d.broker.URL}, Access: acc, Window: time.Second, Log: log, Trust: trust},
			func(u string) { urls <- u })
	}()
	select {
	case d.dashURL = <-urls:
	case err := <-done:
		cancel()
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	d.say("dashboard: %s (otactl dashboard --broker %s: the fleet and the rollouts, live)", d.dashURL, d.broker.URL)
	return func() { cancel(); <-done }, nil
}

// keepUp keeps everything running after the demo, for a look at the
// dashboard, until ctx ends (Ctrl-C).
func (d *run) keepUp(ctx context.Context) {
	d.say("\n--keep: the devices, the broker and the dashboard stay up: %s (Ctrl-C ends)", d.dashURL)
	<-ctx.Done()
}
