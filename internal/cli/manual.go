package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strings"
)

// Manual is what a program's man page and shell completions are made of.
// Commands come from the program's own command table and each command's
// flag set (read from its -h), so that neither can lag the commands
// (issue 31); the rest is the program's prose.
type Manual struct {
	Name        string // "otactl"
	Section     string // "1", "8"
	Title       string // the NAME line after the dash
	Version     string
	Synopsis    string // after the name: "COMMAND [flags] [args]"
	Description []string
	Commands    []ManCommand
	Env         []Item // variable name, what it does
	Exit        []Item // code, meaning
	Files       []Item
	Examples    []Item // command line, what it does
	SeeAlso     []string
}

// Item is a term and its text.
type Item struct{ Term, Text string }

// ExitNote is the one-line summary of exit codes a usage ends with: each
// item's code and its text up to the first parenthesis.
func ExitNote(codes []Item) string {
	parts := make([]string, len(codes))
	for i, c := range codes {
		text, _, _ := strings.Cut(c.Text, " (")
		parts[i] = c.Term + " " + text
	}
	return "Exit codes: " + strings.Join(parts, ", ") + "."
}

// ManCommand is one command as its help describes it.
type ManCommand struct {
	Path     string // "rollout start"
	Synopsis string // the usage line after the program's name and Path
	Summary  string
	Flags    []ManFlag
	Subs     []string // the next words, for a command that has subcommands
	Words    []string // the fixed words its argument is one of (booted|other), from its synopsis
}

// ManFlag is one flag of a command's flag set.
type ManFlag struct {
	Name, Arg, Usage, Default string // Arg is empty for a boolean flag
}

// Dashed is the flag as the man page writes it: -c, --payload (the flag
// package takes either).
func (f ManFlag) Dashed() string {
	if len(f.Name) == 1 {
		return "-" + f.Name
	}
	return "--" + f.Name
}

// argNames names a flag's value by its type when its usage does not
// (flag.UnquoteUsage's `NAME`).
var argNames = map[string]string{"string": "VALUE", "value": "VALUE", "duration": "DURATION", "int": "N", "uint": "N", "int64": "N", "uint64": "N", "float": "NUMBER"}

// ReadHelp makes a ManCommand from what a command's -h returned: its
// usage line and its flag set. An error means the command did not answer
// -h with its flag set, so its flags cannot be documented.
func ReadHelp(program, path, summary string, h HelpError) (ManCommand, error) {
	if h.Flags == nil {
		return ManCommand{}, fmt.Errorf("%s %s -h: no flag set (a command with subcommands lists them in its table)", program, path)
	}
	mc := ManCommand{Path: path, Summary: summary}
	first, _, _ := strings.Cut(h.Usage, "\n")
	first = strings.TrimPrefix(first, "usage: ")
	mc.Synopsis = strings.TrimSpace(strings.TrimPrefix(first, program+" "+path))
	mc.Words = WordSet(mc.Synopsis)
	h.Flags.VisitAll(func(f *flag.Flag) {
		arg, usage := flag.UnquoteUsage(f)
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			arg = ""
		} else if n, ok := argNames[arg]; ok {
			arg = n
		}
		mf := ManFlag{Name: f.Name, Arg: arg, Usage: usage}
		switch f.DefValue {
		case "", "false", "0", "0s", "[]":
		default:
			mf.Default = f.DefValue
		}
		mc.Flags = append(mc.Flags, mf)
	})
	return mc, nil
}

// wordSet is an argument that is one of fixed words: booted|other.
var wordSet = regexp.MustCompile(`^[a-z][a-z0-9-]*(\|[a-z][a-z0-9-]*)+$`)

// WordSet is the words a command's argument must be one of, when its
// synopsis ends in them as "booted|other": the usage line the command
// declares is the one source of what the completions offer there.
func WordSet(synopsis string) []string {
	f := strings.Fields(synopsis)
	if len(f) == 0 || !wordSet.MatchString(f[len(f)-1]) {
		return nil
	}
	return strings.Split(f[len(f)-1], "|")
}

// Manual walks the program's commands, subcommands first-to-last in name
// order, each asked for -h; the prose comes from m.
func (p Program) Manual(ctx context.Context, m Manual) (Manual, error) {
	var walk func(prog Program, prefix string) error
	walk = func(prog Program, prefix string) error {
		for _, n := range sortedNames(prog.Commands) {
			c := prog.Commands[n]
			if c.Sub != nil {
				m.Commands = append(m.Commands, ManCommand{Path: prefix + n, Summary: c.Summary, Subs: sortedNames(c.Sub)})
				if err := walk(prog.sub(n, c), prefix+n+" "); err != nil {
					return err
				}
				continue
			}
			var h HelpError
			if err := c.Run(ctx, []string{"-h"}, io.Discard, io.Discard); !errors.As(err, &h) {
				return fmt.Errorf("%s %s -h: %v, not its help", p.Name, prefix+n, err)
			}
			mc, err := ReadHelp(p.Name, prefix+n, c.Summary, h)
			if err != nil {
				return err
			}
			m.Commands = append(m.Commands, mc)
		}
		return nil
	}
	if err := walk(p, ""); err != nil {
		return m, err
	}
	if _, ok := p.Commands["version"]; !ok && p.Version != "" {
		m.Commands = append(m.Commands, ManCommand{Path: "version", Summary: "print the version (also --version)"})
	}
	m.Commands = append(m.Commands, ManCommand{Path: "help", Synopsis: "[COMMAND]", Summary: "the commands, or a command's flags (help COMMAND)"})
	return m, nil
}

// TopLevel is the first words a command line can start with.
func (m Manual) TopLevel() []string {
	var top []string
	for _, c := range m.Commands {
		if !strings.Contains(c.Path, " ") {
			top = append(top, c.Path)
		}
	}
	return top
}

// roff escapes text for a man page: backslashes, minus signs (lintian
// wants flags' hyphens as \-), and a line starting with a control
// character.
func roff(s string) string {
	s = strings.NewReplacer(`\`, `\e`, "-", `\-`).Replace(s)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}

// Man writes the man page.
func (m Manual) Man(w io.Writer) error {
	var b strings.Builder
	up := strings.ToUpper(m.Name)
	fmt.Fprintf(&b, ".\\\" Generated from %s's command table (%s man); do not edit.\n", m.Name, m.Name)
	fmt.Fprintf(&b, ".TH %s %s \"\" \"%s %s\" \"otad manual\"\n", up, m.Section, m.Name, roff(m.Version))
	fmt.Fprintf(&b, ".SH NAME\n%s \\- %s\n", m.Name, roff(m.Title))
	fmt.Fprintf(&b, ".SH SYNOPSIS\n.B %s\n%s\n", m.Name, roff(m.Synopsis))
	b.WriteString(".SH DESCRIPTION\n")
	for i, p := range m.Description {
		if i > 0 {
			b.WriteString(".PP\n")
		}
		b.WriteString(roff(p) + "\n")
	}
	b.WriteString(".SH COMMANDS\n")
	for _, c := range m.Commands {
		fmt.Fprintf(&b, ".SS \"%s %s\"\n", m.Name, roff(c.Path))
		if c.Synopsis != "" {
			fmt.Fprintf(&b, ".B %s %s\n%s\n.br\n", m.Name, roff(c.Path), roff(c.Synopsis))
		}
		b.WriteString(roff(c.Summary) + ".\n")
		if len(c.Subs) > 0 {
			fmt.Fprintf(&b, "Subcommands: %s.\n", roff(strings.Join(c.Subs, ", ")))
		}
		for _, f := range c.Flags {
			if f.Arg != "" {
				fmt.Fprintf(&b, ".TP\n.BI \"%s \" %s", roff(f.Dashed()), roff(f.Arg))
			} else {
				fmt.Fprintf(&b, ".TP\n.B %s", roff(f.Dashed()))
			}
			b.WriteString("\n" + roff(f.Usage))
			if f.Default != "" {
				fmt.Fprintf(&b, " (default: %s)", roff(f.Default))
			}
			b.WriteString("\n")
		}
	}
	section := func(title string, items []Item) {
		if len(items) == 0 {
			return
		}
		fmt.Fprintf(&b, ".SH %s\n", title)
		for _, it := range items {
			fmt.Fprintf(&b, ".TP\n.B %s\n%s\n", roff(it.Term), roff(it.Text))
		}
	}
	section("ENVIRONMENT", m.Env)
	section("EXIT STATUS", m.Exit)
	section("FILES", m.Files)
	if len(m.Examples) > 0 {
		b.WriteString(".SH EXAMPLES\n")
		for _, ex := range m.Examples {
			fmt.Fprintf(&b, ".PP\n%s\n.PP\n.RS\n.nf\n%s\n.fi\n.RE\n", roff(ex.Text), roff(ex.Term))
		}
	}
	if len(m.SeeAlso) > 0 {
		b.WriteString(".SH SEE ALSO\n")
		for i, s := range m.SeeAlso {
			name, sec, _ := strings.Cut(s, "(")
			sep := ","
			if i == len(m.SeeAlso)-1 {
				sep = ""
			}
			fmt.Fprintf(&b, ".BR %s (%s%s\n", roff(name), strings.TrimSuffix(sec, ")")+")", sep)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
