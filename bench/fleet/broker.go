package main

import (
	"context"

	"github.com/otad/otad/internal/testkit/mosquittotest"
)

// startBroker runs a mosquitto of our own on a free loopback port, with its
// files in dir, until Stop.
func startBroker(ctx context.Context, dir string, nodelay bool) (*mosquittotest.Broker, error) {
	// Stock settings: the fleet's progress is watched in-process, not
	// through a wildcard subscription.
	var extra []string
	if nodelay {
		extra = append(extra, "set_tcp_nodelay true")
	}
	return mosquittotest.Run(ctx, dir, mosquittotest.Options{Quiet: true, LogTail: 16 << 10, Extra: extra})
}
