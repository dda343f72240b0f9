package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"sort"
	"strings"
	"syscall"

	"github.com/otad/otad/ota"
)

// Command is one subcommand: it parses its own flags from args. A command
// with subcommands of its own ("otactl rollout start") has them in Sub and
// no Run: the program dispatches to them, lists them in its help, and its
// man page and completions walk them (manual.go).
type Command struct {
	Summary string
	Run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
	Sub     map[string]Command
}

// Program is a command-line tool with subcommands.
type Program struct {
	Name     string
	Commands map[string]Command
	Notes    []string // printed under the command list
	// Code gives the exit code of an error that is neither a usage error nor
	// a request for help; nil: ota.ExitFailure.
	Code func(error) int
	// Version is the build's (cmd's -X main.version): `NAME version`,
	// `--version` and `-version` print "NAME VERSION". Empty: no such command.
	Version string
}

// BuildVersion is the version a main was built with (-ldflags -X
// main.version=...), or, without one, the module version `go install
// module@version` stamps, or "devel".
func BuildVersion(stamped string) string {
	if stamped != "" {
		return stamped
	}
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
		return strings.TrimPrefix(info.Main.Version, "v")
	}
	return "devel"
}

// IsVersion reports whether arg asks a program for its version.
func IsVersion(arg string) bool {
	switch arg {
	case "version", "-version", "--version":
		return true
	}
	return false
}

// Main runs run with the program's arguments and a context that ends on
// SIGINT or SIGTERM, and exits with what it returns.
func Main(run func(ctx context.Context, args []string, stdout, stderr io.Writer) int) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Tool is Main for a program without subcommands: run's error is printed
// as "NAME: err" and mapped to an exit code.
func Tool(name string, run func(ctx context.Context, args []string, stdout, stderr io.Writer) error) {
	Main(func(ctx context.Context, args []string, stdout, stderr io.Writer) int {
		return Program{Name: name}.Exit(stderr, "", run(ctx, args, stdout, stderr))
	})
}

// Run dispatches args[0] to its subcommand and returns the exit code.
func (p Program) Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		p.usage(stderr)
		return ota.ExitUsage
	}
	name, rest := args[0], args[1:]
	if _, isCommand := p.Commands[name]; !isCommand && p.Version != "" && IsVersion(name) {
		switch {
		case len(rest) == 1 && isHelpArg(rest[0]):
			fmt.Fprintf(stdout, "usage: %s version (or %s --version)\n\nprints the version: %s VERSION\n", p.Name, p.Name, p.Name)
			return ota.ExitOK
		case len(rest) > 0:
			fmt.Fprintf(stderr, "%s %s: unexpected arguments %q\n", p.Name, name, rest)
			return ota.ExitUsage
		}
		fmt.Fprintln(stdout, p.Name, p.Version)
		return ota.ExitOK
	}
	switch name {
	case "-h", "-help", "--help", "help":
		if len(rest) > 0 {
			c, ok := p.Commands[rest[0]]
			if !ok {
				fmt.Fprintf(stderr, "%s: unknown command %q\n", p.Name, rest[0])
				p.usage(stderr)
				return ota.ExitUsage
			}
			if c.Sub != nil {
				return p.sub(rest[0], c).Run(ctx, append(rest[1:], "-h"), stdout, stderr)
			}
			return p.exit(stdout, stderr, rest[0], c.Run(ctx, []string{"-h"}, stdout, stderr))
		}
		p.usage(stdout)
		return ota.ExitOK
	}
	c, ok := p.Commands[name]
	if !ok {
		fmt.Fprintf(stderr, "%s: unknown command %q\n", p.Name, name)
		p.usage(stderr)
		return ota.ExitUsage
	}
	if c.Sub != nil {
		return p.sub(name, c).Run(ctx, rest, stdout, stderr)
	}
	return p.exit(stdout, stderr, name, c.Run(ctx, rest, stdout, stderr))
}

// sub is the program "NAME COMMAND" whose commands are c's subcommands.
func (p Program) sub(name string, c Command) Program {
	return Program{Name: p.Name + " " + name, Commands: c.Sub, Code: p.Code}
}

func isHelpArg(a string) bool { return a == "-h" || a == "-help" || a == "--help" }

// usage lists every command, a command's subcommands under it, so that
// the help names all the man page does.
func (p Program) usage(w io.Writer) {
	type line struct{ name, summary string }
	var lines []line
	var walk func(prefix string, cmds map[string]Command)
	walk = func(prefix string, cmds map[string]Command) {
		for _, n := range sortedNames(cmds) {
			lines = append(lines, line{prefix + n, cmds[n].Summary})
			if sub := cmds[n].Sub; sub != nil {
				walk(prefix+n+" ", sub)
			}
		}
	}
	walk("", p.Commands)
	if _, ok := p.Commands["version"]; !ok && p.Version != "" {
		lines = append(lines, line{"version", "print the version (also --version)"})
	}
	lines = append(lines, line{"help", "the commands, or a command's flags (help COMMAND)"})
	width := 8
	for _, l := range lines {
		width = max(width, len(l.name))
	}
	fmt.Fprintf(w, "usage: %s COMMAND [flags] [args]\n\n", p.Name)
	for _, l := range lines {
		fmt.Fprintf(w, "  %-*s %s\n", width, l.name, l.summary)
	}
	fmt.Fprintf(w, "\nRun '%s COMMAND -h' for a command's flags.\n", p.Name)
	for _, n := range p.Notes {
		fmt.Fprintln(w, n)
	}
}

func sortedNames(cmds map[string]Command) []string {
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Exit prints err (unless the flag set already did) as "PROGRAM COMMAND:
// err" and maps it to an exit code; command may be empty for a tool
// without subcommands.
// A tool without subcommands prints its -h usage to stderr too.
func (p Program) Exit(stderr io.Writer, command string, err error) int {
	return p.exit(stderr, stderr, command, err)
}

func (p Program) exit(stdout, stderr io.Writer, command string, err error) int {
	switch {
	case errors.Is(err, flag.ErrHelp):
		PrintHelp(stdout, err)
		return ota.ExitOK
	case err == nil:
		return ota.ExitOK
	case errors.Is(err, ErrFlagsReported):
		return ota.ExitUsage
	}
	who := p.Name
	if command != "" {
		who += " " + command
	}
	fmt.Fprintf(stderr, "%s: %v\n", who, err)
	switch {
	case errors.As(err, new(UsageError)):
		fmt.Fprintf(stderr, "Run '%s -h' for usage.\n", who)
		return ota.ExitUsage
	case p.Code != nil:
		return p.Code(err)
	default:
		return ota.ExitFailure
	}
}
