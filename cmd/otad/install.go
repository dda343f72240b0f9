package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/otad/otad/internal/control"
	"github.com/otad/otad/internal/node"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/verify"
)

func cmdInstall(e *env, args []string) int {
	fs, cfg, code := e.setup(args, nil)
	if cfg == nil {
		return code
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(e.stderr, "usage: otad install [-c FILE] ENVELOPE")
		return ota.ExitUsage
	}
	file := fs.Arg(0)
	raw, err := verify.ReadEnvelopeFile(file)
	if err != nil {
		return e.fail(ota.ExitFailure, "%v", err)
	}
	o, err := control.Client{Path: cfg.ControlSocket}.Install(e.ctx, raw)
	if errors.Is(err, control.ErrNoDaemon) {
		// No daemon: install in this process, under the same lock, until the
		// offer's outcome is known (or the sim device reboots under it).
		code, err = e.inProcess(cfg, func(ctx context.Context, n *node.Node) (err error) {
			o, err = n.Agent.Install(ctx, raw)
			return err
		})
		if code != ota.ExitOK {
			return code
		}
	}
	if err != nil {
		return e.fail(ota.ExitFailure, "%v", err)
	}
	return e.report(file, o)
}
func (e *env) report(file string, o ota.Outcome) int {
	switch o.Result {
	case ota.ResultRejected:
		fmt.Fprintf(e.stderr, "otad: %s: offer refused: %s\n", file, withCode(o))
	case ota.ResultStaged:
		fmt.Fprintf(e.stdout, "%s: installed %s (%s): %s\n", file, o.ID, short(o.SHA256), o.Message)
	case ota.ResultUpToDate, ota.ResultSuccess, ota.ResultPending:
		fmt.Fprintf(e.stdout, "%s: %s: %s\n", file, o.Result, o.Message)
	default:
		fmt.Fprintf(e.stderr, "otad: %s: %s: %s\n", file, o.Result, withCode(o))
	}
	return o.ExitCode()
}

// withCode is the outcome's message, led by its code once.
func withCode(o ota.Outcome) string {
	if o.Code == "" {
		return o.Message
	}
	return ota.Errorf(o.Code, "%s", o.Message).Error()
}
