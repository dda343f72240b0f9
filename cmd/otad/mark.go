package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/otad/otad/agent"
	"github.com/otad/otad/internal/control"
	"github.com/otad/otad/internal/node"

	"github.com/otad/otad/ota"
)

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
