// Command otad is the on-device update agent and its device CLI
// (docs/contract/commands.md); its body is package device.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/otad/otad/device"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := device.Run(ctx, version, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
