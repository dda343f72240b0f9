package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/otad/otad/agent"
	"github.com/otad/otad/internal/config"
	"github.com/otad/otad/internal/control"
	"github.com/otad/otad/internal/daemon"
	"github.com/otad/otad/internal/node"
	"github.com/otad/otad/internal/statelock"
	"github.com/otad/otad/verify"

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

type env struct {
	ctx      context.Context
	stdout   io.Writer
	stderr   io.Writer
	cfgPath  string
	machine  string // machine-id file
	logLevel slog.Level
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

// openDevice takes the state lock and assembles the device.
func (e *env) openDevice(cfg *config.Config, log *slog.Logger) (*node.Node, *statelock.Lock, int) {
	lock, err := statelock.Acquire(cfg.StateDir)
	if errors.Is(err, statelock.ErrBusy) {
		return nil, nil, e.fail(ota.ExitBusy, "%v", err)
	}
	if err != nil {
		return nil, nil, e.fail(ota.ExitFailure, "%v", err)
	}
	d, err := node.Open(cfg, node.Options{AgentVersion: version, Logger: log})
	if err != nil {
		lock.Release()
		return nil, nil, e.fail(ota.ExitFailure, "%v", err)
	}
	return d, lock, ota.ExitOK
}

func cmdRun(e *env, args []string) int {
	if _, ok := e.flags(args, nil); !ok {
		return ota.ExitUsage
	}
	cfg, err := e.config()
	if err != nil {
		return e.fail(ota.ExitFailure, "%v", err)
	}
	lock, err := statelock.Acquire(cfg.StateDir)
	if errors.Is(err, statelock.ErrBusy) {
		return e.fail(ota.ExitBusy, "%v", err)
	}
	if err != nil {
		return e.fail(ota.ExitFailure, "%v", err)
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

func cmdInstall(e *env, args []string) int {
	fs, ok := e.flags(args, nil)
	if !ok {
		return ota.ExitUsage
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
	cfg, err := e.config()
	if err != nil {
		return e.fail(ota.ExitFailure, "%v", err)
	}
	o, err := control.Client{Path: cfg.ControlSocket}.Install(e.ctx, raw)
	if errors.Is(err, control.ErrNoDaemon) {
		o, err = e.installInProcess(cfg, raw)
		if err != nil {
			var busy busyError
			if errors.As(err, &busy) {
				return int(busy)
			}
			return e.fail(ota.ExitFailure, "%v", err)
		}
	} else if err != nil {
		return e.fail(ota.ExitFailure, "%v", err)
	}
	return e.report(file, o)
}

type busyError int

func (b busyError) Error() string { return "busy" }

// installInProcess runs the agent in this process under the state lock until
// the offer's outcome is known (or the sim device reboots under it).
func (e *env) installInProcess(cfg *config.Config, raw []byte) (ota.Outcome, error) {
	log := e.logger()
	d, lock, code := e.openDevice(cfg, log)
	if d == nil {
		return ota.Outcome{}, busyError(code)
	}
	defer lock.Release()
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- d.Run(ctx) }()
	o, err := d.Agent.Install(ctx, raw)
	cancel()
	if rerr := <-runErr; rerr != nil && err == nil {
		err = rerr
	}
	return o, err
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

func cmdStatus(e *env, args []string) int {
	var asJSON bool
	if _, ok := e.flags(args, func(fs *flag.FlagSet) { fs.BoolVar(&asJSON, "json", false, "print the status snapshot as JSON") }); !ok {
		return ota.ExitUsage
	}
	cfg, err := e.config()
	if err != nil {
		return e.fail(ota.ExitFailure, "%v", err)
	}
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	st, err := control.Client{Path: cfg.ControlSocket}.Status(ctx)
	if errors.Is(err, control.ErrNoDaemon) {
		// No daemon: the journal is replaced atomically, so reading it without
		// the lock is safe.
		s, _, jerr := agent.Journal{Dir: cfg.StateDir}.Load()
		if jerr != nil {
			return e.fail(ota.ExitFailure, "%v", jerr)
		}
		st, err = agent.Snapshot(cfg.DeviceID, version, s, time.Now()), nil
		st.Groups = cfg.MQTT.Groups
	}
	if err != nil {
		return e.fail(ota.ExitFailure, "%v", err)
	}
	if asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		enc.Encode(st)
		return ota.ExitOK
	}
	printStatus(e.stdout, st)
	return ota.ExitOK
}

func printStatus(w io.Writer, st ota.Status) {
	fmt.Fprintf(w, "device:      %s\nstate:       %s\nbooted slot: %s\n", st.Device, st.State, orDash(string(st.BootedSlot)))
	for _, n := range slices.Sorted(maps.Keys(st.Slots)) {
		s := st.Slots[n]
		fmt.Fprintf(w, "slot %s:      %-12s %-8s sha256 %s security_version %d\n", n, orDash(s.Version), orDash(string(s.Status)), short(s.SHA256), s.SecurityVersion)
	}
	if t := st.Target; t != nil {
		fmt.Fprintf(w, "target:      %s (%s) %d/%d bytes\n", t.ID, t.Version, t.BytesDone, t.BytesTotal)
	}
	if p := st.Pending; p != nil {
		fmt.Fprintf(w, "pending:     %s (%s)\n", p.ID, p.Version)
	}
	if r := st.LastResult; r != nil {
		fmt.Fprintf(w, "last result: %s %s %s", r.ID, r.Result, r.Code)
		if r.Message != "" {
			fmt.Fprintf(w, " (%s)", r.Message)
		}
		fmt.Fprintln(w)
	}
}

func cmdMark(e *env, args []string) int {
	if _, ok := e.flags(args, nil); !ok {
		return ota.ExitUsage
	}
	cfg, err := e.config()
	if err != nil {
		return e.fail(ota.ExitFailure, "%v", err)
	}
	good := args[0] == "mark-good"
	c := control.Client{Path: cfg.ControlSocket}
	if good {
		err = c.MarkGood(e.ctx)
	} else {
		err = c.MarkBad(e.ctx)
	}
	if errors.Is(err, control.ErrNoDaemon) {
		d, lock, code := e.openDevice(cfg, e.logger())
		if d == nil {
			return code
		}
		defer lock.Release()
		ctx, cancel := context.WithCancel(e.ctx)
		runErr := make(chan error, 1)
		go func() { runErr <- d.Run(ctx) }()
		if good {
			err = d.Agent.MarkGood(ctx)
		} else {
			err = d.Agent.MarkBad(ctx)
		}
		cancel()
		if rerr := <-runErr; rerr != nil && err == nil {
			err = rerr
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

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return orDash(sha)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
