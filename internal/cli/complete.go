package cli

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// The completions, like the man page, are made from the Manual: the words
// that may follow a command path (its subcommands) and its flags. Each
// script finds the command path the same way: the words before the cursor
// that are a next level's command, skipping flags and a value flag's value.

// Shells are the shells Completion writes for.
var Shells = []string{"bash", "zsh", "fish"}

// Completion writes the completion script of shell.
func (m Manual) Completion(w io.Writer, shell string) error {
	switch shell {
	case "bash":
		return m.bash(w)
	case "zsh":
		return m.zsh(w)
	case "fish":
		return m.fish(w)
	}
	return Usagef("no completion for shell %q (one of %s)", shell, strings.Join(Shells, ", "))
}

// fn is the shell function prefix: otactl -> _otactl.
func (m Manual) fn() string { return "_" + strings.ReplaceAll(m.Name, "-", "_") }

// children is the words that follow path ("" for the top level).
func (m Manual) children(path string) []string {
	if path == "" {
		return m.TopLevel()
	}
	for _, c := range m.Commands {
		if c.Path == path {
			return c.Subs
		}
	}
	return nil
}

// words is what completes after c: its subcommands, the words its
// argument is one of (mark-active booted|other, completion bash|zsh|fish),
// the commands after "help".
func (m Manual) words(c ManCommand) []string {
	switch {
	case len(c.Subs) > 0:
		return c.Subs
	case len(c.Words) > 0:
		return c.Words
	case c.Path == "help":
		return m.TopLevel()
	}
	return nil
}

// valueFlags is every flag that takes a value, as -f and --f.
func (m Manual) valueFlags() []string {
	var v []string
	for _, c := range m.Commands {
		for _, f := range c.Flags {
			if f.Arg != "" && !slices.Contains(v, "-"+f.Name) {
				v = append(v, "-"+f.Name, "--"+f.Name)
			}
		}
	}
	return v
}

// pathCase is a shell case pattern list of every command path, quoted.
func (m Manual) pathCase() string {
	var q []string
	for _, c := range m.Commands {
		q = append(q, fmt.Sprintf("%q", c.Path))
	}
	return strings.Join(q, "|")
}

func flagWords(c ManCommand, dashes string) string {
	var w []string
	for _, f := range c.Flags {
		w = append(w, dashes+f.Name)
	}
	return strings.Join(w, " ")
}

func (m Manual) bash(w io.Writer) error {
	var b strings.Builder
	f := m.fn()
	fmt.Fprintf(&b, "# bash completion for %s, generated from its command table (%s completion bash); do not edit.\n", m.Name, m.Name)
	fmt.Fprintf(&b, "%s() {\n", f)
	b.WriteString("\tlocal cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} path= i w\n")
	b.WriteString("\tfor ((i = 1; i < COMP_CWORD; i++)); do\n\t\tw=${COMP_WORDS[i]}\n\t\tcase $w in\n")
	if vf := m.valueFlags(); len(vf) > 0 {
		fmt.Fprintf(&b, "\t\t%s) ((i++)); continue ;;\n", strings.Join(vf, "|"))
	}
	b.WriteString("\t\t-*) continue ;;\n\t\tesac\n")
	fmt.Fprintf(&b, "\t\tcase ${path:+$path }$w in\n\t\t%s) path=${path:+$path }$w ;;\n\t\tesac\n\tdone\n", m.pathCase())
	if vf := m.valueFlags(); len(vf) > 0 {
		fmt.Fprintf(&b, "\tcase $prev in\n\t%s) COMPREPLY=($(compgen -f -- \"$cur\")); return ;;\n\tesac\n", strings.Join(vf, "|"))
	}
	b.WriteString("\tlocal words= flags= long=\n\tcase $path in\n")
	fmt.Fprintf(&b, "\t\"\") words=%q ;;\n", strings.Join(m.TopLevel(), " "))
	for _, c := range m.Commands {
		fmt.Fprintf(&b, "\t%q) words=%q flags=%q long=%q ;;\n", c.Path, strings.Join(m.words(c), " "), flagWords(c, "-"), flagWords(c, "--"))
	}
	b.WriteString("\tesac\n")
	b.WriteString("\tcase $cur in\n")
	b.WriteString("\t--*) COMPREPLY=($(compgen -W \"$long\" -- \"$cur\")) ;;\n")
	b.WriteString("\t-*) COMPREPLY=($(compgen -W \"$flags\" -- \"$cur\")) ;;\n")
	b.WriteString("\t*) if [ -n \"$words\" ]; then COMPREPLY=($(compgen -W \"$words\" -- \"$cur\")); else COMPREPLY=($(compgen -f -- \"$cur\")); fi ;;\n")
	b.WriteString("\tesac\n}\n")
	// -F names the function; without it bash takes both words as command
	// names and registers no function (issue 31).
	fmt.Fprintf(&b, "complete -o filenames -F %s %s\n", f, m.Name)
	_, err := io.WriteString(w, b.String())
	return err
}

// zq quotes an entry for zsh's _describe, NAME:DESCRIPTION in single
// quotes, a colon in the name escaped.
func zq(name, desc string) string {
	q := strings.NewReplacer("'", `'\''`).Replace
	s := q(strings.ReplaceAll(name, ":", `\:`))
	if desc != "" {
		s += ":" + q(desc)
	}
	return "'" + s + "'"
}

func (m Manual) zsh(w io.Writer) error {
	var b strings.Builder
	f := m.fn()
	fmt.Fprintf(&b, "#compdef %s\n# zsh completion for %s, generated from its command table (%s completion zsh); do not edit.\n", m.Name, m.Name, m.Name)
	fmt.Fprintf(&b, "%s() {\n", f)
	b.WriteString("\tlocal p= i w\n\tlocal -a opts\n\tfor ((i = 2; i < CURRENT; i++)); do\n\t\tw=${words[i]}\n\t\tcase $w in\n")
	if vf := m.valueFlags(); len(vf) > 0 {
		fmt.Fprintf(&b, "\t\t(%s) ((i++)); continue ;;\n", strings.Join(vf, "|"))
	}
	b.WriteString("\t\t(-*) continue ;;\n\t\tesac\n")
	fmt.Fprintf(&b, "\t\tcase ${p:+$p }$w in\n\t\t(%s) p=${p:+$p }$w ;;\n\t\tesac\n\tdone\n", m.pathCase())
	if vf := m.valueFlags(); len(vf) > 0 {
		fmt.Fprintf(&b, "\tcase ${words[CURRENT-1]} in\n\t(%s) _files; return ;;\n\tesac\n", strings.Join(vf, "|"))
	}
	b.WriteString("\tcase $p in\n")
	describe := func(path string, c *ManCommand) {
		fmt.Fprintf(&b, "\t(%q)\n", path)
		var subs []string
		for _, n := range m.children(path) {
			for _, mc := range m.Commands {
				if mc.Path == strings.TrimSpace(path+" "+n) {
					subs = append(subs, zq(n, mc.Summary))
				}
			}
		}
		if c != nil && len(c.Subs) == 0 {
			for _, n := range m.words(*c) {
				subs = append(subs, zq(n, ""))
			}
		}
		if c != nil && len(c.Flags) > 0 {
			var fl []string
			for _, fg := range c.Flags {
				fl = append(fl, zq("--"+fg.Name, fg.Usage))
			}
			fmt.Fprintf(&b, "\t\tif [[ $PREFIX == -* ]]; then opts=(%s); _describe -o flag opts; return; fi\n", strings.Join(fl, " "))
		}
		if len(subs) > 0 {
			fmt.Fprintf(&b, "\t\topts=(%s); _describe command opts ;;\n", strings.Join(subs, " "))
		} else {
			b.WriteString("\t\t_files ;;\n")
		}
	}
	describe("", nil)
	for i := range m.Commands {
		describe(m.Commands[i].Path, &m.Commands[i])
	}
	b.WriteString("\tesac\n}\n")
	// Autoloaded from fpath (#compdef), the file's first run completes;
	// sourced, it registers the function.
	fmt.Fprintf(&b, "if [ \"$funcstack[1]\" = %q ]; then\n\t%s \"$@\"\nelse\n\tcompdef %s %s\nfi\n", f, f, f, m.Name)
	_, err := io.WriteString(w, b.String())
	return err
}

// fq quotes s for fish: single quotes.
func fq(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, "'", `\'`).Replace(s) + "'"
}

func (m Manual) fish(w io.Writer) error {
	var b strings.Builder
	f := "__" + strings.ReplaceAll(m.Name, "-", "_") + "_path"
	fmt.Fprintf(&b, "# fish completion for %s, generated from its command table (%s completion fish); do not edit.\n", m.Name, m.Name)
	fmt.Fprintf(&b, "function %s\n\tset -l p ''\n\tset -l skip 0\n\tfor w in (commandline -opc)[2..-1]\n", f)
	b.WriteString("\t\tif test $skip = 1\n\t\t\tset skip 0\n\t\t\tcontinue\n\t\tend\n\t\tswitch $w\n")
	if vf := m.valueFlags(); len(vf) > 0 {
		fmt.Fprintf(&b, "\t\t\tcase %s\n\t\t\t\tset skip 1\n\t\t\t\tcontinue\n", strings.Join(vf, " "))
	}
	b.WriteString("\t\t\tcase '-*'\n\t\t\t\tcontinue\n\t\tend\n")
	b.WriteString("\t\tset -l next (string trim -- \"$p $w\")\n\t\tswitch $next\n")
	var paths []string
	for _, c := range m.Commands {
		paths = append(paths, fq(c.Path))
	}
	// In brackets: an empty path is still one word for test.
	fmt.Fprintf(&b, "\t\t\tcase %s\n\t\t\t\tset p $next\n\t\tend\n\tend\n\techo \"[$p]\"\nend\n", strings.Join(paths, " "))
	fmt.Fprintf(&b, "complete -c %s -f\n", m.Name)
	for _, c := range m.Commands {
		parent, name := "", c.Path
		if i := strings.LastIndex(c.Path, " "); i >= 0 {
			parent, name = c.Path[:i], c.Path[i+1:]
		}
		fmt.Fprintf(&b, "complete -c %s -n %s -a %s -d %s\n", m.Name, fq("test ("+f+") = "+fq("["+parent+"]")), fq(name), fq(c.Summary))
		for _, fg := range c.Flags {
			cond := fq("test (" + f + ") = " + fq("["+c.Path+"]"))
			req := ""
			if fg.Arg != "" {
				req = " -r -F"
			}
			fmt.Fprintf(&b, "complete -c %s -n %s -o %s -l %s%s -d %s\n", m.Name, cond, fq(fg.Name), fq(fg.Name), req, fq(fg.Usage))
		}
		if len(c.Subs) == 0 {
			for _, n := range m.words(c) {
				fmt.Fprintf(&b, "complete -c %s -n %s -a %s\n", m.Name, fq("test ("+f+") = "+fq("["+c.Path+"]")), fq(n))
			}
		}
		if len(c.Subs) == 0 && len(m.words(c)) == 0 && c.Path != "version" {
			fmt.Fprintf(&b, "complete -c %s -n %s -F\n", m.Name, fq("test ("+f+") = "+fq("["+c.Path+"]")))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
