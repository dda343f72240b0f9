// Command otactl is the operator / cloud side CLI of otad (docs/contract/commands.md); the
// commands are in internal/otactl.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/otad/otad/internal/otactl"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := otactl.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
