package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/otad/otad/internal/config"
	"github.com/otad/otad/internal/node"
	"github.com/otad/otad/internal/statelock"
	"github.com/otad/otad/ota"
)

type env struct {
	ctx      context.Context
	stdout   io.Writer
	stderr   io.Writer
	cfgPath  string
	machine  string // machine-id file
	logLevel slog.Level
}

// flags parses the common -c flag plus the command's own.
func (e *env) flags(args []string, extra func(fs *flag.FlagSet)) (*flag.FlagSet, bool) {
	fs := flag.NewFlagSet("otad "+args[0], flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.StringVar(&e.cfgPath, "c", config.DefaultPath, "config file")
	verbose := fs.Bool("v", false, "debug logging")
	if extra != nil {
		extra(fs)
	}
	if err := fs.Parse(args[1:]); err != nil {
		return nil, false
	}
	if *verbose {
		e.logLevel = slog.LevelDebug
	}
	return fs, true
}

func (e *env) config() (*config.Config, error) { return config.Load(e.cfgPath, e.machine) }

func (e *env) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: e.logLevel}))
}

func (e *env) fail(code int, format string, a ...any) int {
	fmt.Fprintf(e.stderr, "otad: "+format+"\n", a...)
	return code
}

// setup parses the command's flags (extra adds its own) and loads the config;
// a non-zero code ends the command.
func (e *env) setup(args []string, extra func(fs *flag.FlagSet)) (*flag.FlagSet, *config.Config, int) {
	fs, ok := e.flags(args, extra)
	if !ok {
		return nil, nil, ota.ExitUsage
	}
	cfg, err := e.config()
	if err != nil {
		return nil, nil, e.fail(ota.ExitFailure, "%v", err)
	}
	return fs, cfg, ota.ExitOK
}

// lock takes the state lock: busy (exit 4) while another otad holds it.
func (e *env) lock(cfg *config.Config) (*statelock.Lock, int) {
	lock, err := statelock.Acquire(cfg.StateDir)
	if errors.Is(err, statelock.ErrBusy) {
		return nil, e.fail(ota.ExitBusy, "%v", err)
	}
	if err != nil {
		return nil, e.fail(ota.ExitFailure, "%v", err)
	}
	return lock, ota.ExitOK
}

// inProcess runs the agent in this process under the state lock, for a
// command that found no daemon, and calls fn while it runs. It returns fn's
// error (or Run's) with ExitOK, or the exit code when the agent could not start.
func (e *env) inProcess(cfg *config.Config, fn func(ctx context.Context, n *node.Node) error) (int, error) {
	lock, code := e.lock(cfg)
	if lock == nil {
		return code, nil
	}
	defer lock.Release()
	n, err := node.Open(cfg, node.Options{AgentVersion: version, Logger: e.logger()})
	if err != nil {
		return e.fail(ota.ExitFailure, "%v", err), nil
	}
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- n.Run(ctx) }()
	err = fn(ctx, n)
	cancel()
	if rerr := <-runErr; rerr != nil && err == nil {
		err = rerr
	}
	return ota.ExitOK, err
}
