package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/otad/otad/agent"
	"github.com/otad/otad/internal/control"
	"github.com/otad/otad/internal/daemon"
	"github.com/otad/otad/internal/node"
	"github.com/otad/otad/ota"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

var commands = map[string]func(e *env, args []string) int{
	"run":       cmdRun,
	"install":   cmdInstall,
	"status":    cmdStatus,
	"mark-good": cmdMark,
	"mark-bad":  cmdMark,
	"version":   func(e *env, _ []string) int { fmt.Fprintln(e.stdout, "otad", version); return ota.ExitOK },
}

const usage = `usage: otad COMMAND [-c FILE] [args]

commands:
  run                 the daemon
  install FILE        install a signed offer envelope (through the daemon if it runs)
  status [--json]     booted slot, slot contents, state, last result
  mark-good           commit the booted slot
  mark-bad            reject the booted slot and return to the other one
  version             print the version
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return ota.ExitUsage
	}
	name := args[0]
	cmd, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "otad: unknown command %q\n%s", name, usage)
		return ota.ExitUsage
	}
	e := &env{ctx: ctx, stdout: stdout, stderr: stderr, machine: "/etc/machine-id"}
	return cmd(e, args)
}

func cmdRun(e *env, args []string) int {
	_, cfg, code := e.setup(args, nil)
	if cfg == nil {
		return code
	}
	lock, code := e.lock(cfg)
	if lock == nil {
		return code
	}
	defer lock.Release()
	if err := daemon.Run(e.ctx, cfg, daemon.Options{AgentVersion: version, Logger: e.logger()}); err != nil {
		var envErr *node.BootEnvError
		if errors.As(err, &envErr) {
			return e.fail(ota.ExitNeedsOperator, "%v", err)
		}
		return e.fail(ota.ExitFailure, "%v", err)
	}
	return ota.ExitOK
}

func cmdMark(e *env, args []string) int {
	_, cfg, code := e.setup(args, nil)
	if cfg == nil {
		return code
	}
	good := args[0] == "mark-good"
	mark := func(ctx context.Context, c interface {
		MarkGood(context.Context) error
		MarkBad(context.Context) error
	}) error {
		if good {
			return c.MarkGood(ctx)
		}
		return c.MarkBad(ctx)
	}
	err := mark(e.ctx, control.Client{Path: cfg.ControlSocket})
	if errors.Is(err, control.ErrNoDaemon) {
		code, err = e.inProcess(cfg, func(ctx context.Context, n *node.Node) error { return mark(ctx, n.Agent) })
		if code != ota.ExitOK {
			return code
		}
	}
	if err != nil && !errors.Is(err, agent.ErrRebooted) {
		return e.fail(ota.ExitFailure, "%v", err)
	}
	st := "good"
	if !good {
		st = "bad"
	}
	fmt.Fprintf(e.stdout, "booted slot marked %s\n", st)
	return ota.ExitOK
}
