package otactl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"

	"github.com/otad/otad/ota"
)

// Exit codes of SPEC §9 (4, busy, is otad's alone).
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
	exitRefused = 3
)

// commandFunc runs one subcommand with its own arguments and returns the exit code.
type commandFunc func(ctx context.Context, args []string, stdout, stderr io.Writer) int

type command struct {
	summary string
	run     commandFunc
}

// commands is the subcommand table; a new subcommand is one more entry.
func commands() map[string]command {
	return map[string]command{
		"keygen":  {"write a signing key pair NAME.key / NAME.pub", runKeygen},
		"sign":    {"sign an image into an offer envelope (stdout)", runSign},
		"verify":  {"check an envelope offline and print its manifest", runVerify},
		"publish": {"publish an envelope as a device's or group's desired state (MQTT)", runPublish},
		"status":  {"fleet table from the MQTT status topics", runStatus},
	}
}

// Run runs the command line args (without the program name) and returns the
// exit code of SPEC §9. The demo runs the operator's commands through it too.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmds := commands()
	if len(args) == 0 {
		usage(stderr, cmds)
		return ota.ExitUsage
	}
	name, rest := args[0], args[1:]
	switch name {
	case "-h", "-help", "--help", "help":
		if len(rest) > 0 {
			if c, ok := cmds[rest[0]]; ok {
				return c.run(ctx, []string{"-h"}, stdout, stderr)
			}
		}
		usage(stdout, cmds)
		return ota.ExitOK
	}
	c, ok := cmds[name]
	if !ok {
		fmt.Fprintf(stderr, "otactl: unknown command %q\n", name)
		usage(stderr, cmds)
		return ota.ExitUsage
	}
	return c.run(ctx, rest, stdout, stderr)
}

func usage(w io.Writer, cmds map[string]command) {
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintln(w, "usage: otactl COMMAND [flags] [args]")
	fmt.Fprintln(w)
	for _, n := range names {
		fmt.Fprintf(w, "  %-8s %s\n", n, cmds[n].summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'otactl COMMAND -h' for a command's flags.")
	fmt.Fprintln(w, "Exit codes: 0 ok, 1 failure, 2 usage, 3 offer refused, 4 busy.")
}

// usageError is a problem with the command line (exit 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// errFlagsReported marks a flag parsing error the FlagSet has already printed with its usage.
var errFlagsReported = errors.New("invalid flags")

// exitCode prints err (unless already printed) and maps it to an exit code of SPEC §9.
func exitCode(stderr io.Writer, name string, err error) int {
	switch {
	case err == nil:
		return ota.ExitOK
	case errors.Is(err, flag.ErrHelp):
		return ota.ExitOK
	case errors.Is(err, errFlagsReported):
		return ota.ExitUsage
	}
	fmt.Fprintf(stderr, "otactl %s: %v\n", name, err)
	var ue usageError
	switch {
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "Run 'otactl %s -h' for usage.\n", name)
		return ota.ExitUsage
	case ota.CodeOf(err) != "":
		return ota.ExitRefused
	default:
		return ota.ExitFailure
	}
}
