package device

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/otad/otad/agent"
	"github.com/otad/otad/device/config"
	"github.com/otad/otad/device/control"
	"github.com/otad/otad/device/node"
	"github.com/otad/otad/ota"
)

// The operator's undo (docs/contract/commands.md): otad cancel stops a
// running download or install; otad mark-active booted|other as RAUC's.

func cmdCancel(e *env, args []string) int {
	e.logLevel = slog.LevelWarn
	_, cfg, code := e.setup(args, 0, nil)
	if cfg == nil {
		return code
	}
	return e.operate(cfg, func(ctx context.Context, c operator) error { return c.Cancel(ctx) },
		func(st ota.Status) (string, int) {
			if r := st.LastResult; r != nil && r.Code == ota.CodeCancelled {
				return fmt.Sprintf("cancelled %s; slot %s was not marked, the boot slot did not change (otad install of the same offer starts it again)", r.ID, st.BootedSlot.Other()), ota.ExitOK
			}
			return "cancelled", ota.ExitOK
		})
}

func cmdMarkActive(e *env, args []string) int {
	e.logLevel = slog.LevelWarn
	pos, cfg, code := e.setup(args, 1, nil)
	if cfg == nil {
		return code
	}
	var other bool
	switch pos[0] {
	case "booted":
	case "other":
		other = true
	default:
		return e.fail(ota.ExitUsage, "mark-active: %q: say booted or other", pos[0])
	}
	manual := cfg.Reboot.Policy == "manual"
	return e.operate(cfg, func(ctx context.Context, c operator) error { return c.MarkActive(ctx, other) },
		func(st ota.Status) (string, int) {
			if !other {
				return droppedSays(st, manual)
			}
			if manual {
				return fmt.Sprintf("slot %s is primary; reboot.policy is manual: reboot the device (systemctl reboot) to boot it", st.BootedSlot.Other()), ota.ExitOK
			}
			return fmt.Sprintf("slot %s is primary; rebooting", st.BootedSlot.Other()), ota.ExitOK
		})
}

// droppedSays is what mark-active booted did, from the status after it: the
// staged install dropped, and what became of a pending offer it took up
// (docs/contract/commands.md): running in the daemon, staged or ended when
// this process ran it. The exit code is that ending's, as otad install
// exits for it: the drop is done either way, and said so.
func droppedSays(st ota.Status, manual bool) (string, int) {
	msg := fmt.Sprintf("slot %s is primary again; the staged install is dropped", st.BootedSlot)
	t, r := st.Target, st.LastResult
	switch {
	case t != nil && (st.State == ota.Downloading || st.State == ota.Verifying):
		return fmt.Sprintf("%s; the pending %s is taken up: %s into slot %s (otad status follows it)", msg, t.ID, st.State, st.BootedSlot.Other()), ota.ExitOK
	case t != nil:
		next := "rebooting"
		if manual {
			next = "reboot to boot it (reboot.policy is manual: otad does not reboot)"
		}
		return fmt.Sprintf("%s; the pending %s is taken up: staged in slot %s; %s", msg, t.ID, st.BootedSlot.Other(), next), ota.ExitOK
	case r != nil && r.Code != ota.CodeCancelled:
		return fmt.Sprintf("%s; the pending %s was taken up and ended %s: %s", msg, r.ID, r.Result, withCode(*r)), r.ExitCode()
	}
	return msg + fmt.Sprintf("; slot %s keeps the verified image (otad mark-active other boots it)", st.BootedSlot.Other()), ota.ExitOK
}

// operator is what cancel, mark-active, mark-good and mark-bad ask of the
// daemon or the agent.
type operator interface {
	Cancel(context.Context) error
	MarkActive(context.Context, bool) error
	MarkGood(context.Context) error
	MarkBad(context.Context) error
}

// operate asks the daemon, or the agent in this process when none runs, and
// says what came of it (said, from the status after) or why not. said's
// exit code is not ExitOK when what the operation went on to do failed (the
// install a mark-active booted took up): the line then goes to stderr.
func (e *env) operate(cfg *config.Config, op func(context.Context, operator) error, said func(ota.Status) (string, int)) int {
	c := control.Client{Path: cfg.ControlSocket}
	var after ota.Status
	err := op(e.ctx, c)
	if err == nil {
		after, _ = c.Status(e.ctx)
	}
	if errors.Is(err, control.ErrNoDaemon) {
		var code int
		code, err = e.inProcess(cfg, func(ctx context.Context, n *node.Node) error {
			err := op(ctx, n.Agent)
			if err == nil {
				// A pending offer the op took up (a dropped staged install)
				// runs here, as otad install without a daemon runs one: the
				// journal is not left downloading with nothing running.
				stop := e.follow(func(context.Context) (ota.Status, error) { return n.Agent.Status(), nil })
				err = waitInstall(ctx, n.Agent.Status)
				stop()
			}
			after = n.Agent.Status()
			return err
		})
		if code != ota.ExitOK {
			return code
		}
	}
	switch {
	case err != nil && e.ctx.Err() != nil:
		return e.fail(ota.ExitFailure, "interrupted: the install this took up stopped with this command and resumes when otad next runs (otad cancel ends it)")
	case err != nil && !errors.Is(err, agent.ErrRebooted):
		return e.fail(ota.ExitFailure, "%v", err)
	}
	msg, code := said(after)
	if code != ota.ExitOK {
		return e.fail(code, "%s", msg)
	}
	fmt.Fprintln(e.stdout, msg)
	return ota.ExitOK
}

// waitInstall waits while status says an install is downloading or
// verifying: until its flip or its ending, or ctx ends.
func waitInstall(ctx context.Context, status func() ota.Status) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if st := status().State; st != ota.Downloading && st != ota.Verifying {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}
