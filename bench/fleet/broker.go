package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/internal/testkit/testtool"
)

// broker is one mosquitto process of our own on a free loopback port.
type broker struct {
	*mosquittotest.Process
	URL string // mqtt://127.0.0.1:PORT
	log *testtool.Buffer
}

// startBroker writes dir/mosquitto.conf and runs mosquitto until Stop.
func startBroker(ctx context.Context, dir string, nodelay bool) (*broker, error) {
	bin, err := mosquittotest.Binary()
	if err != nil {
		return nil, err
	}
	port, err := mosquittotest.Port()
	if err != nil {
		return nil, err
	}
	lines := []string{
		"listener " + strconv.Itoa(port) + " 127.0.0.1",
		"allow_anonymous true",
		// The observers subscribe to every device's status: a rollout's burst
		// must not overflow their queues (the default is 1000).
		"max_queued_messages 10000",
		// Only trouble: a line per client connection would be the whole log.
		"log_dest stderr",
		"log_type error",
		"log_type warning",
		"connection_messages false",
	}
	if nodelay {
		lines = append(lines, "set_tcp_nodelay true")
	}
	if os.Geteuid() == 0 {
		// As root mosquitto drops to user "mosquitto", which cannot read dir.
		lines = append(lines, "user root")
	}
	conf := filepath.Join(dir, "mosquitto.conf")
	if err := os.WriteFile(conf, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("mosquitto config: %w", err)
	}
	b := &broker{URL: fmt.Sprintf("mqtt://127.0.0.1:%d", port), log: &testtool.Buffer{Max: 16 << 10}}
	if b.Process, err = mosquittotest.Launch(ctx, bin, conf, port, b.log); err != nil {
		return nil, err
	}
	return b, nil
}
