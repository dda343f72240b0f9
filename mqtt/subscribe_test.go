package mqtt

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/internal/testkit/testtool"
)

// paho runs onConnect in its own goroutine, so its subscribe can come after
// Close (an agent rebooting right after it connected, otasim fleet with
// failing health checks) or after the connection dropped again. Neither
// loses anything (the next connect subscribes anew), so neither is an ERROR.
func TestSubscribeAfterConnectionGone(t *testing.T) {
	tests := []struct {
		name string
		gone func(t *testing.T, d *Conn, b *mosquittotest.Broker)
		want string // the line onConnect logs
	}{
		{"closed", func(t *testing.T, d *Conn, _ *mosquittotest.Broker) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := d.Close(ctx); err != nil {
				t.Fatalf("Close: %v", err)
			}
		}, `level=DEBUG msg="mqtt: subscribe abandoned: closing"`},
		{"broker gone", func(t *testing.T, d *Conn, b *mosquittotest.Broker) {
			b.Stop()
			waitFor(t, "connection lost", 5*time.Second, func() bool { return !d.Connected() })
		}, `level=INFO msg="mqtt: subscribe abandoned: connection gone, renewed on reconnect"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := mosquittotest.Start(t, mosquittotest.Options{Quiet: true})
			var logs testtool.Buffer
			log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			d := dial(t, Config{Broker: b.URL, DeviceID: "gw-1", Logger: log}, newOffers())
			waitFor(t, "connected", 10*time.Second, d.Connected)
			tc.gone(t, d, b)

			d.onConnect(d.client) // as paho's goroutine, late
			out := logs.String()
			if !strings.Contains(out, tc.want) {
				t.Errorf("log lacks %s:\n%s", tc.want, out)
			}
			if strings.Contains(out, "level=ERROR") {
				t.Errorf("a subscribe on a connection gone logged an error:\n%s", out)
			}
		})
	}
}
