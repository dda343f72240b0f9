package device

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/otad/otad/device/config"
	"github.com/otad/otad/device/node"
	"github.com/otad/otad/device/statelock"
	"github.com/otad/otad/internal/cli"
	"github.com/otad/otad/ota"
)

type env struct {
	ctx      context.Context
	version  string
	stdout   io.Writer
	stderr   io.Writer
	cfgPath  string
	machine  string // machine-id file
	logLevel slog.Level
	getenv   func(string) string
	// journal: stderr is the journal stream (logging.go): every line says
	// its priority.
	journal bool
	log     *slog.Logger
	// help is what the last -h gave (its usage and flag set): the man page
	// and the completions read the commands' flags from it (manual.go).
	help *cli.HelpError
}

// flags parses the common -c and -v flags and the command's own (extra),
// anywhere among the arguments (args[0] is the command), and returns the
// nargs positional ones. done says the command ends here with code: 0
// after -h (the usage on stdout), 2 after a bad flag or a wrong number of
// arguments (the usage on stderr).
func (e *env) flags(args []string, nargs int, extra func(fs *flag.FlagSet)) (pos []string, code int, done bool) {
	name := args[0]
	_, cmds := commands()
	synopsis := cmds[name].args
	if name == "trust update" {
		synopsis = "FILE..."
	}
	if name == "config check" {
		synopsis = ""
	}
	fs := cli.NewFlagSet("otad "+name, strings.TrimSpace("[-c FILE] [-v] [flags] "+synopsis), e.stderr)
	fs.StringVar(&e.cfgPath, "c", config.DefaultPath, "config file")
	verbose := fs.Bool("v", false, "debug logging")
	if extra != nil {
		extra(fs)
	}
	pos, err := cli.Parse(fs, args[1:])
	switch {
	case errors.Is(err, flag.ErrHelp):
		cli.PrintHelp(e.stdout, err)
		e.help = new(cli.HelpError)
		errors.As(err, e.help)
		return nil, ota.ExitOK, true
	case err != nil:
		return nil, ota.ExitUsage, true
	case nargs < 0 && len(pos) < -nargs:
		fmt.Fprintf(e.stderr, "otad %s: want at least %d arguments, got %q\n", name, -nargs, pos)
		fs.Usage()
		return nil, ota.ExitUsage, true
	case nargs >= 0 && len(pos) != nargs:
		fmt.Fprintf(e.stderr, "otad %s: want %d arguments, got %q\n", name, nargs, pos)
		fs.Usage()
		return nil, ota.ExitUsage, true
	}
	if *verbose {
		e.logLevel = slog.LevelDebug
	}
	return pos, ota.ExitOK, false
}

func (e *env) config() (*config.Config, error) { return config.Load(e.cfgPath, e.machine) }

// logger is the process's one logger (logging.go), at the level the
// command and -v set, made on first use.
func (e *env) logger() *slog.Logger {
	if e.log == nil {
		e.log = newLogger(e.stderr, e.logLevel, e.journal)
	}
	return e.log
}

// fail prints "otad: " and the message, at error priority on the journal,
// and returns code.
func (e *env) fail(code int, format string, a ...any) int {
	e.printErr("otad: " + fmt.Sprintf(format, a...))
	return code
}

// printErr writes a line (or lines) for the person reading stderr, each at
// error priority on the journal.
func (e *env) printErr(text string) {
	io.WriteString(e.stderr, atPriority(e.journal, slog.LevelError, strings.TrimSuffix(text, "\n")+"\n"))
}

// setup parses the command's flags (flags) and loads the config; a nil
// config ends the command with code.
func (e *env) setup(args []string, nargs int, extra func(fs *flag.FlagSet)) ([]string, *config.Config, int) {
	pos, code, done := e.flags(args, nargs, extra)
	if done {
		return nil, nil, code
	}
	cfg, err := e.config()
	if err != nil {
		// 2, as `otad config check` says of the same file.
		return nil, nil, e.fail(ota.ExitUsage, "%v", err)
	}
	return pos, cfg, ota.ExitOK
}

// lock takes the state lock: busy (exit 4) while another otad holds it; a
// state directory others could write is refused as otad config check
// refuses it (node.StateDirRefusal).
func (e *env) lock(cfg *config.Config) (*statelock.Lock, int) {
	lock, err := statelock.Acquire(cfg.StateDir)
	if errors.Is(err, statelock.ErrBusy) {
		return nil, e.fail(ota.ExitBusy, "%v", err)
	}
	if r := node.StateDirRefusal(cfg, err); r != nil {
		return nil, e.fail(r.Code, "%v", r)
	}
	if err != nil {
		return nil, e.fail(ota.ExitFailure, "%v", err)
	}
	return lock, ota.ExitOK
}

// exitCode is the exit code of a command that could not start the agent: a
// start-up refusal's own (node.Refusal: 2 for the config's values, 5 for an
// unreadable boot environment), else 1.
func exitCode(err error) int {
	var r *node.Refusal
	if errors.As(err, &r) {
		return r.Code
	}
	return ota.ExitFailure
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
	pages := newExePages()
	n, err := node.Open(cfg, node.Options{AgentVersion: e.version, Logger: e.logger(), BeforeWrite: pages.drop, Pipelined: pipelinedProcs()})
	if err != nil {
		return e.fail(exitCode(err), "%v", err), nil
	}
	limitMemory()
	spareProc()
	pages.drop()
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
