// Command otasim runs simulated devices on this machine (SPEC §9): `otasim
// demo` is the whole flow with embedded parts (§11). Each subcommand is one
// entry of commands(); the fleet simulator of §14 will be another.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"

	"github.com/otad/otad/ota"
)

// Exit codes of SPEC §9.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

// commands is the subcommand table; a new subcommand is one more entry.
func commands() map[string]command {
	return map[string]command{
		"demo": {"the whole flow on this machine: broker, image server, 5 simulated devices", runDemo},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches args[0] to its subcommand.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmds := commands()
	if len(args) == 0 {
		usage(stderr, cmds)
		return ota.ExitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage(stdout, cmds)
		return ota.ExitOK
	}
	c, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "otasim: unknown command %q\n", args[0])
		usage(stderr, cmds)
		return ota.ExitUsage
	}
	return c.run(ctx, args[1:], stdout, stderr)
}

func usage(w io.Writer, cmds map[string]command) {
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintln(w, "usage: otasim COMMAND [flags]")
	fmt.Fprintln(w)
	for _, n := range names {
		fmt.Fprintf(w, "  %-8s %s\n", n, cmds[n].summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'otasim COMMAND -h' for a command's flags.")
}

// usageError is a problem with the command line (exit 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// newFlagSet makes a subcommand's flag set; errors and -h print to stderr.
func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("otasim "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: otasim %s %s\n\nflags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses a subcommand's flags; it takes no positional arguments.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %w", errFlagsReported, err)
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q", fs.Args())
	}
	return nil
}

// errFlagsReported marks a flag error the FlagSet has already printed.
var errFlagsReported = errors.New("invalid flags")

// exitCode prints err (unless already printed) and maps it to an exit code.
func exitCode(stderr io.Writer, name string, err error) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return ota.ExitOK
	case errors.Is(err, errFlagsReported):
		return ota.ExitUsage
	}
	fmt.Fprintf(stderr, "otasim %s: %v\n", name, err)
	if errors.As(err, new(usageError)) {
		fmt.Fprintf(stderr, "Run 'otasim %s -h' for usage.\n", name)
		return ota.ExitUsage
	}
	return ota.ExitFailure
}
