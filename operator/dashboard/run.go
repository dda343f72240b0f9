package dashboard

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/otad/otad/fleetview"
	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/rollout"
	"github.com/otad/otad/rollout/seen"
)

// Options shape Run.
type Options struct {
	Broker mqtt.Config
	Access *Access // checked (Access.Check)
	// Window is the report request's (fleetview.FollowOptions.Window).
	Window time.Duration
	// BrokerQueue is the broker's queue for a client (0: no limit): the
	// page says when the answers came faster than it lets through
	// (fleetview.Coverage.Overflow).
	BrokerQueue int
	Log         *slog.Logger
	// Trust verifies the rollouts' states shown (docs/contract/rollouts.md).
	Trust rollout.Trust
	// Command publishes a rollout's operator commands through the
	// dashboard's session (otactl's rollout pause/resume/abort code); nil:
	// the page offers none.
	Command func(ctx context.Context, sess *mqtt.Session, name string, op rollout.Op, reason string) error
	// Counters keep the highest state counters shown across restarts
	// (--state-dir); nil: within this run only.
	Counters *seen.Store
}

// Run follows the fleet and the rollouts on the broker and serves the page
// on Access.Listen until ctx ends; ready, if set, is given the page's URL
// once it listens.
func Run(ctx context.Context, o Options, ready func(url string)) error {
	ln, err := net.Listen("tcp", o.Access.Listen)
	if err != nil {
		return fmt.Errorf("dashboard: %w", err)
	}
	defer ln.Close()
	prefix := o.Broker.TopicPrefix
	fv := fleetview.New(prefix)
	s := &Server{Fleet: fv, Rollouts: NewRollouts(prefix, o.Trust, o.Log), Access: o.Access, Log: o.Log,
		Coverage: func() string { return fv.Coverage().Say(o.BrokerQueue) }}
	s.Rollouts.Remember(o.Counters, o.Broker.BrokerList())
	sess, err := fv.Follow(ctx, o.Broker, fleetview.FollowOptions{
		Window: o.Window, Events: true, Changed: s.Changed,
		Extra: map[string]byte{s.Rollouts.Filter(): 1},
		Other: func(m mqtt.Message) {
			if s.Rollouts.Observe(m) {
				s.Changed()
			}
		},
	})
	if err != nil {
		return err
	}
	defer sess.Close()
	if o.Command != nil {
		s.Command = func(ctx context.Context, name string, op rollout.Op, reason string) error {
			return o.Command(ctx, sess, name, op, reason)
		}
	}
	if ready != nil {
		ready(o.Access.URL(ln.Addr()))
	}
	return s.Serve(ctx, ln)
}

// URL is the page's address on addr (the listener's, with its port).
func (a *Access) URL(addr net.Addr) string {
	scheme := "http"
	if a.tls != nil {
		scheme = "https"
	}
	host, _, _ := net.SplitHostPort(a.Listen)
	_, port, _ := net.SplitHostPort(addr.String())
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return scheme + "://" + net.JoinHostPort(host, port) + "/"
}
