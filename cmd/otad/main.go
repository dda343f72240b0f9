// Command otad is the on-device update agent and its device CLI
// (docs/contract/commands.md); its body is package device.
package main

import (
	"context"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/otad/otad/device"
	"github.com/otad/otad/internal/cli"
)

// version is set at build time with -ldflags "-X main.version=..." (make
// build: packaging/version), the same string as otactl's and the package's.
var version string

func main() {
	if n := procs(os.Getenv("GOMAXPROCS"), runtime.GOMAXPROCS(0)); n != runtime.GOMAXPROCS(0) {
		// Set only when it changes: setting it ends the runtime's own
		// updates from the CPU limit.
		runtime.GOMAXPROCS(n)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := device.Run(ctx, cli.BuildVersion(version), os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// procs is the number of Ps otad runs with: at least two unless GOMAXPROCS
// is set. On a one-CPU device a slot write (O_DIRECT) holds its thread for
// as long as the storage takes; with one P the writer, once its write
// returns, waits behind the decoder for the P (up to a 10 ms time slice)
// while the storage idles. With two, the kernel runs the writer as soon as
// its write returns, as it would a process of its own (docs/design.md,
// Writing a slot).
func procs(env string, now int) int {
	if env != "" {
		return now
	}
	return max(now, 2)
}
