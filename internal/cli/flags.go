package cli

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// UsageError is a problem with the command line (exit 2).
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// Usagef makes a UsageError.
func Usagef(format string, args ...any) error {
	return UsageError{fmt.Errorf(format, args...)}
}

// ErrFlagsReported marks a flag error the flag set has already printed with
// its usage.
var ErrFlagsReported = errors.New("invalid flags")

// HelpError is -h: it carries the usage, which goes to stdout (help that
// was asked for can be paged or grepped), and it is flag.ErrHelp. Flags is
// the command's flag set when Parse made it: the man page and the
// completions read the flags from it (manual.go).
type HelpError struct {
	Usage string
	Flags *flag.FlagSet
}

func (HelpError) Error() string        { return flag.ErrHelp.Error() }
func (HelpError) Is(target error) bool { return target == flag.ErrHelp }

// PrintHelp writes err's usage to stdout if err is a HelpError.
func PrintHelp(stdout io.Writer, err error) {
	var h HelpError
	if errors.As(err, &h) {
		io.WriteString(stdout, h.Usage)
	}
}

// NewFlagSet makes the flag set of "name" (a program, or "program command");
// errors print to stderr with the synopsis, and -h returns it in a
// HelpError (Parse).
func NewFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: %s %s\n\nflags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// Parse parses args allowing flags after positional arguments
// ("otactl verify FILE --pub P") and returns the positional ones; everything
// after "--" is positional. -h returns a HelpError with the usage; a bad
// flag is printed with the usage to the flag set's output.
func Parse(fs *flag.FlagSet, args []string) ([]string, error) {
	// The flag package writes help and errors to one output: hold it until
	// it is known which it is.
	out, buf := fs.Output(), new(bytes.Buffer)
	fs.SetOutput(buf)
	defer fs.SetOutput(out)
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, HelpError{Usage: buf.String(), Flags: fs}
			}
			out.Write(buf.Bytes())
			return nil, fmt.Errorf("%w: %w", ErrFlagsReported, err)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// ParseNone parses args for a command that takes flags only.
func ParseNone(fs *flag.FlagSet, args []string) error {
	pos, err := Parse(fs, args)
	if err == nil && len(pos) > 0 {
		err = Usagef("unexpected arguments %q", pos)
	}
	return err
}

// StringList is a repeatable string flag.
type StringList []string

func (s *StringList) String() string { return strings.Join(*s, ",") }

// Set adds one value.
func (s *StringList) Set(v string) error {
	if v == "" {
		return errors.New("empty value")
	}
	*s = append(*s, v)
	return nil
}
