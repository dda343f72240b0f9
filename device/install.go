package device

import (
	"time"

	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"

	"github.com/otad/otad/agent"
	"github.com/otad/otad/device/control"
	"github.com/otad/otad/device/node"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/verify"
)

func cmdInstall(e *env, args []string) int {
	// The progress display tells the story; -v brings the log back.
	e.logLevel = slog.LevelWarn
	var location string
	pos, cfg, code := e.setup(args, 1, func(fs *flag.FlagSet) {
		fs.StringVar(&location, "payload", "", "read the payload from this file or URL, not the signed one (a chunked payload: PATH.idx and PATH.store)")
	})
	if cfg == nil {
		return code
	}
	file := pos[0]
	raw, err := verify.ReadEnvelopeFile(file)
	if err != nil {
		return e.fail(ota.ExitFailure, "%v", err)
	}
	var given *givenPayload
	if location != "" {
		if given, err = payloadFor(location, raw); err != nil {
			return e.fail(ota.ExitUsage, "%v", err)
		}
		defer given.close()
	}
	client := control.Client{Path: cfg.ControlSocket}
	var o ota.Outcome
	daemon := true
	if given != nil {
		// The payload is this command's: an offer that would wait behind an
		// unsettled install would no longer have it after the reboot.
		if st, serr := client.Status(e.ctx); serr == nil {
			err = agent.GivenPayloadBusy(st)
		}
	}
	if err == nil {
		stop := e.follow(client.Status)
		if given != nil {
			p, files := given.control()
			o, err = client.InstallPayload(e.ctx, raw, p, files)
		} else {
			o, err = client.Install(e.ctx, raw)
		}
		stop()
	}
	if errors.Is(err, control.ErrNoDaemon) {
		// No daemon: install in this process, under the same lock, until the
		// offer's outcome is known (or the sim device reboots under it).
		daemon = false
		code, err = e.inProcess(cfg, func(ctx context.Context, n *node.Node) (err error) {
			if given != nil {
				if err := agent.GivenPayloadBusy(n.Agent.Status()); err != nil {
					return err
				}
				n.Sources.Put(verify.EnvelopeDigest(raw), given.source())
			}
			stop := e.follow(func(context.Context) (ota.Status, error) { return n.Agent.Status(), nil })
			if given != nil {
				o, err = n.Agent.InstallGiven(ctx, agent.SourceLocal, raw)
			} else {
				o, err = n.Agent.Install(ctx, raw)
			}
			stop()
			return err
		})
		if code != ota.ExitOK {
			return code
		}
	}
	var busy *agent.BusyError
	switch {
	case errors.As(err, &busy):
		return e.fail(ota.ExitBusy, "%s: %v", file, err)
	case err != nil && e.ctx.Err() != nil && daemon:
		// Ctrl-C stops this command, not the daemon's install.
		return e.fail(ota.ExitFailure, "interrupted: the daemon goes on with the install (otad status follows it; otad cancel stops it)")
	case err != nil && e.ctx.Err() != nil:
		return e.fail(ota.ExitFailure, "interrupted: the install stopped with this command and resumes when otad next runs (otad cancel ends it)")
	case err != nil:
		return e.fail(ota.ExitFailure, "%v", err)
	}
	return e.report(file, o, cfg.Reboot.Policy == "manual")
}

// follow shows the install's progress on stderr (progress.go) from status,
// polled, until stop is called.
func (e *env) follow(status func(context.Context) (ota.Status, error)) (stop func()) {
	p := newProgress(e.stderr, e.getenv, e.journal)
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.watch(ctx, status)
	}()
	return func() {
		cancel()
		<-done
		p.finish()
	}
}

func (e *env) report(file string, o ota.Outcome, manual bool) int {
	if o.AlreadyEnded {
		e.reportEnded(file, o)
		return o.ExitCode()
	}
	switch o.Result {
	case ota.ResultRejected:
		e.printErr(fmt.Sprintf("otad: %s: offer refused: %s", file, withCode(o)))
	case ota.ResultStaged:
		next := "rebooting"
		if manual {
			next = "reboot to boot it (reboot.policy is manual: otad does not reboot)"
		}
		fmt.Fprintf(e.stdout, "%s: staged %s (%s): %s%s; %s\n", file, o.ID, short(o.SHA256), o.Message, transfer(o.Transfer), next)
	case ota.ResultUpToDate, ota.ResultSuccess, ota.ResultPending:
		fmt.Fprintf(e.stdout, "%s: %s: %s%s\n", file, o.Result, o.Message, transfer(o.Transfer))
	default:
		e.printErr(fmt.Sprintf("otad: %s: %s: %s", file, o.Result, withCode(o)))
	}
	return o.ExitCode()
}

// reportEnded says that the offer had ended before and was not tried again
// (docs/contract/commands.md): its earlier ending, marked as such, and what
// tries the image again. The exit code stays the ending's.
func (e *env) reportEnded(file string, o ota.Outcome) {
	msg := fmt.Sprintf("%s: not tried again: %s already ended %s", file, o.ID, o.Result)
	if o.Time.IsZero() {
		msg += " before" // a journal written before endings kept their time
	} else {
		msg += " at " + o.Time.UTC().Format(time.RFC3339)
	}
	if said := withCode(o); said != "" {
		msg += fmt.Sprintf(" (%s)", said)
	}
	if o.ExitCode() == ota.ExitOK {
		fmt.Fprintln(e.stdout, msg)
		return
	}
	if !o.Retryable {
		msg += "; a final ending never starts again: fix the cause, then sign the image again (otactl sign: a new issued_at makes a new offer) and install that"
	}
	e.printErr("otad: " + msg)
}

// withCode is the outcome's message, led by its code once.
func withCode(o ota.Outcome) string {
	if o.Code == "" {
		return o.Message
	}
	return ota.Errorf(o.Code, "%s", o.Message).Error()
}
