// Command otad is the on-device update agent and its device CLI
// (docs/contract/commands.md); its body is package device.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/otad/otad/device"
	"github.com/otad/otad/internal/cli"
)

// version is set at build time with -ldflags "-X main.version=..." (make
// build: packaging/version), the same string as otactl's and the package's.
var version string

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := device.Run(ctx, cli.BuildVersion(version), os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
