package packaging

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/otad/otad/device"
	"github.com/otad/otad/device/config"
	"github.com/otad/otad/internal/cli"
	"github.com/otad/otad/operator"
	"github.com/otad/otad/sim"
)

// program is one of the two programs as the tests drive them: in process,
// the way cmd/ runs them.
type program struct {
	name   string
	run    func(args ...string) (code int, stdout string)
	manual func(ctx context.Context, version string) (cli.Manual, error)
}

func programs() []program {
	return []program{
		{"otad", func(args ...string) (int, string) {
			var out, errb bytes.Buffer
			code := device.Run(context.Background(), "1.0", args, &out, &errb)
			return code, out.String()
		}, device.Manual},
		{"otactl", func(args ...string) (int, string) {
			var out, errb bytes.Buffer
			code := operator.Program("1.0").Run(context.Background(), args, &out, &errb)
			return code, out.String()
		}, operator.Manual},
		{"otasim", func(args ...string) (int, string) {
			var out, errb bytes.Buffer
			code := sim.Program("1.0").Run(context.Background(), args, &out, &errb)
			return code, out.String()
		}, sim.Manual},
	}
}

var helpFlag = regexp.MustCompile(`(?m)^  -([a-z][a-z0-9-]*)`)

// The man page names every command the help lists, and, for each command,
// every flag its own -h prints (read from the text, not from the table the
// page was made from); the help lists every command of the page.
func TestManPageNamesEveryCommandAndFlag(t *testing.T) {
	for _, p := range programs() {
		t.Run(p.name, func(t *testing.T) {
			m, err := p.manual(context.Background(), "1.0")
			if err != nil {
				t.Fatal(err)
			}
			var page bytes.Buffer
			if err := m.Man(&page); err != nil {
				t.Fatal(err)
			}
			man := strings.ReplaceAll(page.String(), `\-`, "-")
			code, help := p.run("help")
			if code != 0 {
				t.Fatalf("%s help: exit %d", p.name, code)
			}
			// Every command line of the help is a section of the page.
			for _, l := range strings.Split(help, "\n") {
				f := strings.Fields(l)
				if !strings.HasPrefix(l, "  ") || len(f) == 0 || strings.HasPrefix(f[0], "-") {
					continue
				}
				if !strings.Contains(man, fmt.Sprintf(".SS \"%s %s", p.name, f[0])) {
					t.Errorf("%s help lists %q; the man page has no section for it", p.name, f[0])
				}
			}
			for _, c := range m.Commands {
				if !regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(c.Path) + `( |$)`).MatchString(help) {
					t.Errorf("%s help does not list %q", p.name, c.Path)
				}
				if len(c.Subs) > 0 || c.Path == "help" {
					continue
				}
				code, usage := p.run(append(strings.Fields(c.Path), "-h")...)
				if code != 0 || !strings.HasPrefix(usage, "usage: "+p.name+" "+c.Path) {
					t.Errorf("%s %s -h: exit %d, %q", p.name, c.Path, code, usage)
					continue
				}
				sec := man[strings.Index(man, fmt.Sprintf(".SS \"%s %s\"", p.name, c.Path)):]
				if i := strings.Index(sec[4:], ".SS "); i >= 0 {
					sec = sec[:i+4]
				}
				for _, fl := range helpFlag.FindAllStringSubmatch(usage, -1) {
					if !regexp.MustCompile(`(?m)^\.BI? "?-{1,2}` + regexp.QuoteMeta(fl[1]) + `( |"|$)`).MatchString(sec) {
						t.Errorf("man %s: %s %s has no -%s", p.name, p.name, c.Path, fl[1])
					}
				}
			}
			for _, s := range []string{".SH ENVIRONMENT", ".SH EXIT STATUS", ".SH EXAMPLES", ".SH SEE ALSO"} {
				if !strings.Contains(man, s) && (s != ".SH ENVIRONMENT" || p.name != "otasim") { // otasim reads none
					t.Errorf("man %s lacks %s", p.name, s)
				}
			}
			// Every exit code the help names is in EXIT STATUS.
			for _, code := range regexp.MustCompile(`(\d) [a-z]`).FindAllStringSubmatch(help[strings.Index(help, "Exit codes:"):], -1) {
				if !strings.Contains(man, ".B "+code[1]+"\n") {
					t.Errorf("man %s: no exit code %s", p.name, code[1])
				}
			}
			// An example's flags are its command's.
			for _, ex := range m.Examples {
				for _, line := range strings.Split(ex.Term, "\n") {
					words := strings.Fields(line)
					if len(words) < 2 || words[0] != p.name {
						continue
					}
					var path []string
					for _, w := range words[1:] {
						if strings.HasPrefix(w, "-") {
							break
						}
						path = append(path, w)
					}
					_, usage := p.run(append(path, "-h")...)
					for _, w := range words {
						if n, ok := strings.CutPrefix(w, "--"); ok && !strings.Contains(usage, "  -"+n+" ") && !strings.Contains(usage, "  -"+n+"\n") {
							t.Errorf("example %q: %s %s has no %s", line, p.name, strings.Join(path, " "), w)
						}
					}
				}
			}
		})
	}
}

// groff reads the pages without a warning (lintian runs the same check).
func TestManPagesFormat(t *testing.T) {
	mn := need(t, "man", "man-db")
	for _, p := range programs() {
		m, err := p.manual(context.Background(), "1.0")
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), m.Name+"."+m.Section)
		f, _ := os.Create(path)
		m.Man(f)
		f.Close()
		cmd := exec.Command(mn, "--warnings", "-E", "UTF-8", "-l", "-Tutf8", "-Z", path)
		cmd.Env = append(os.Environ(), "MANROFFSEQ=", "MANWIDTH=80", "LC_ALL=C.UTF-8")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil || stderr.Len() > 0 {
			t.Errorf("man --warnings %s: %v\n%s", m.Name, err, stderr.String())
		}
	}
}

// The bash completion, generated and sourced as bash-completion would,
// registers its function for the program with complete -F, and that
// function, called as bash calls it, offers every subcommand and the real
// flags.
func TestBashCompletion(t *testing.T) {
	bash := need(t, "bash", "bash")
	dir := t.TempDir()
	for _, p := range programs() {
		m, err := p.manual(context.Background(), "1.0")
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if err := m.Completion(&b, "bash"); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, p.name), b.Bytes(), 0o644)
	}
	os.WriteFile(filepath.Join(dir, "otad.toml"), nil, 0o644)
	for _, p := range programs() {
		script := fmt.Sprintf(". ./%s && complete -p %s", p.name, p.name)
		cmd := exec.Command(bash, "--norc", "-c", script)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", script, err, out)
		}
		if spec := strings.Fields(string(out)); !slices.Contains(spec, "-F") || spec[slices.Index(spec, "-F")+1] != "_"+p.name || spec[len(spec)-1] != p.name {
			t.Errorf("sourced, the %s script registers %q; want complete -F _%s ... %s", p.name, out, p.name, p.name)
		}
	}
	for _, c := range []struct {
		line string // the words typed; the last one is being completed
		want []string
		only bool // nothing else
	}{
		{"otad ", []string{"completion", "config", "help", "info", "install", "mark-bad", "mark-good", "run", "status", "version"}, false},
		{"otad config ", []string{"check"}, true},
		{"otad config check -", []string{"-c", "-file-only", "-unit-dropin", "-v"}, true},
		{"otad ins", []string{"install"}, true},
		{"otad install --", []string{"--c", "--payload", "--v"}, true},
		{"otad status --j", []string{"--json"}, true},
		{"otad -c otad.toml sta", []string{"status"}, true},
		{"otad completion ", []string{"bash", "zsh", "fish"}, true},
		{"otad mark-g", []string{"mark-good"}, true},
		{"otad mark-active ", []string{"booted", "other"}, true},
		{"otad mark-active -c otad.toml o", []string{"other"}, true},
		{"otad config ch", []string{"check"}, true},
		{"otad trust ", []string{"update"}, true},
		{"otactl completion ", []string{"bash", "zsh", "fish"}, true},
		{"otactl completion f", []string{"fish"}, true},
		{"otad help mark", []string{"mark-bad", "mark-good", "mark-active"}, true},
		{"otactl ", []string{"completion", "dashboard", "keygen", "publish", "rollout", "sign", "status", "verify", "version"}, false},
		{"otactl rollout ", []string{"abort", "check", "list", "pause", "resume", "start", "status"}, true},
		{"otactl rollout start --bro", []string{"--broker", "--broker-queue"}, true},
		{"otactl rollout abort --broker mqtt://b --w", []string{"--wait", "--window", "--withdraw"}, true},
		{"otactl sign --ke", []string{"--key"}, true},
		{"otactl status --json", []string{"--json"}, true},
		{"otad install -c otad.t", []string{"otad.toml"}, true},
	} {
		words := strings.Split(c.line, " ")
		q := make([]string, len(words))
		for i, w := range words {
			q[i] = "'" + w + "'"
		}
		// The function is the one complete registered, called with the
		// arguments bash passes: the command, the word, the word before.
		script := fmt.Sprintf(`. ./%s
spec=$(complete -p %s) || exit 3
case $spec in *" -F "*) ;; *) echo "no function registered: $spec"; exit 4 ;; esac
fn=${spec#* -F }; fn=${fn%%%% *}
COMP_WORDS=(%s); COMP_CWORD=%d
"$fn" %s "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"; printf '%%s\n' "${COMPREPLY[@]}"`, words[0], words[0], strings.Join(q, " "), len(words)-1, words[0])
		cmd := exec.Command(bash, "--norc", "-c", script)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v\n%s", c.line, err, out)
		}
		got := strings.Fields(string(out))
		for _, w := range c.want {
			if !slices.Contains(got, w) {
				t.Errorf("%q completes to %q, lacks %q", c.line, got, w)
			}
		}
		if c.only && len(got) != len(c.want) {
			t.Errorf("%q completes to %q, want only %q", c.line, got, c.want)
		}
	}
}

// The zsh and fish scripts name every command path and every flag (no zsh
// or fish here to run them: CI's machine has bash only).
func TestZshAndFishCompletionsNameEverything(t *testing.T) {
	for _, p := range programs() {
		m, err := p.manual(context.Background(), "1.0")
		if err != nil {
			t.Fatal(err)
		}
		if p.name != "otasim" && !slices.ContainsFunc(m.Commands, func(c cli.ManCommand) bool { return c.Path == "completion" && len(c.Words) == 3 }) {
			t.Errorf("%s completion takes no word set", p.name)
		}
		for _, shell := range []string{"zsh", "fish"} {
			var b bytes.Buffer
			if err := m.Completion(&b, shell); err != nil {
				t.Fatal(err)
			}
			s := b.String()
			// How each shell finds the function: zsh's compinit reads
			// the #compdef line of an fpath file named _NAME, and a
			// sourced file calls compdef; fish takes complete -c NAME.
			reg := map[string][]string{
				"zsh":  {"#compdef " + p.name + "\n", "\tcompdef _" + p.name + " " + p.name + "\n"},
				"fish": {"\ncomplete -c " + p.name + " -f\n"},
			}[shell]
			for _, r := range reg {
				if !strings.Contains(s, r) {
					t.Errorf("%s completion of %s does not register with %q", shell, p.name, r)
				}
			}
			if shell == "zsh" && !strings.HasPrefix(s, reg[0]) {
				t.Errorf("zsh completion of %s does not start with %q", p.name, reg[0])
			}
			for _, c := range m.Commands {
				if !strings.Contains(s, c.Path) {
					t.Errorf("%s completion of %s lacks %q", shell, p.name, c.Path)
				}
				for _, f := range c.Flags {
					if !strings.Contains(s, "'--"+f.Name+":") && !strings.Contains(s, "-l '"+f.Name+"'") {
						t.Errorf("%s completion of %s %s lacks --%s", shell, p.name, c.Path, f.Name)
					}
				}
			}
		}
		// A fixed word set is offered, not file names (otad mark-active,
		// PROGRAM completion): in zsh's case for the command's path, in
		// fish's completions under its condition.
		for _, c := range m.Commands {
			if len(c.Words) == 0 {
				continue
			}
			var z, f bytes.Buffer
			m.Completion(&z, "zsh")
			m.Completion(&f, "fish")
			zcase := z.String()[strings.Index(z.String(), fmt.Sprintf("\t(%q)\n", c.Path)):]
			zcase = zcase[:strings.Index(zcase, ";;")]
			cond := fmt.Sprintf("-n 'test (__%s_path) = \\'[%s]\\''", p.name, c.Path)
			for _, w := range c.Words {
				if !strings.Contains(zcase, "'"+w+"'") {
					t.Errorf("zsh: %s %s does not offer %q:\n%s", p.name, c.Path, w, zcase)
				}
				if !strings.Contains(f.String(), "complete -c "+p.name+" "+cond+" -a '"+w+"'\n") {
					t.Errorf("fish: %s %s does not offer %q", p.name, c.Path, w)
				}
			}
			if strings.Contains(zcase, "_files") || strings.Contains(f.String(), cond+" -F\n") {
				t.Errorf("%s %s offers file names besides %q", p.name, c.Path, c.Words)
			}
		}
		if err := m.Completion(new(bytes.Buffer), "tcsh"); err == nil {
			t.Errorf("%s: a completion for tcsh", p.name)
		}
	}
}

// `PROGRAM completion SHELL` prints what packaging/gendocs installs.
func TestCompletionCommandMatchesGenerated(t *testing.T) {
	for _, p := range programs()[:2] { // otasim has no completion command
		for _, shell := range cli.Shells {
			m, err := p.manual(context.Background(), "1.0") // as gendocs, with a version
			if err != nil {
				t.Fatal(err)
			}
			var want bytes.Buffer
			m.Completion(&want, shell)
			if code, got := p.run("completion", shell); code != 0 || got != want.String() {
				t.Errorf("%s completion %s (exit %d) differs from the generated script", p.name, shell, code)
			}
		}
	}
}

// otad.8 names what otad reads and serves outside its config: every
// $VARIABLE the D-Bus page says it reads, the control socket at its
// default and the D-Bus policy the package installs.
func TestOtadManPageEnvironmentAndFiles(t *testing.T) {
	m, err := device.Manual(context.Background(), "1.0")
	if err != nil {
		t.Fatal(err)
	}
	terms := func(items []cli.Item) string {
		var s []string
		for _, it := range items {
			s = append(s, it.Term)
		}
		return strings.Join(s, ", ")
	}
	env, files := terms(m.Env), terms(m.Files)
	page, err := os.ReadFile("../docs/contract/dbus.md")
	if err != nil {
		t.Fatal(err)
	}
	vars := regexp.MustCompile("`\\$([A-Z][A-Z0-9_]+)`").FindAllStringSubmatch(string(page), -1)
	if len(vars) == 0 {
		t.Fatal("docs/contract/dbus.md names no variable: the test reads it wrong")
	}
	for _, v := range vars {
		if !strings.Contains(env, v[1]) {
			t.Errorf("otad.8 ENVIRONMENT (%s) lacks %s, which dbus.md says otad reads", env, v[1])
		}
	}
	recipe, err := os.ReadFile("otad.yaml")
	if err != nil {
		t.Fatal(err)
	}
	policy := regexp.MustCompile(`dst: (/usr/share/dbus-1/system\.d/\S+)`).FindStringSubmatch(string(recipe))
	if policy == nil {
		t.Fatal("otad.yaml installs no D-Bus policy")
	}
	for _, f := range []string{config.DefaultControlSocket, policy[1]} {
		if !strings.Contains(files, f) {
			t.Errorf("otad.8 FILES (%s) lacks %s", files, f)
		}
	}
}

// packaging.md's table of each package lists every file its recipe
// installs (the docs directory as one row; lintian's overrides are
// lintian's).
func TestPackagingTablesListEveryFile(t *testing.T) {
	page, err := os.ReadFile("../docs/contract/packaging.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(page)
	otadAt, otactlAt, endAt := strings.Index(doc, "`otad`, the device's:"), strings.Index(doc, "`otactl`, the workstation's:"), strings.Index(doc, "The manual pages and completions")
	if otadAt < 0 || otactlAt < otadAt || endAt < otactlAt {
		t.Fatal("docs/contract/packaging.md: the two tables are not where the test looks")
	}
	for _, c := range []struct{ pkg, table string }{{"otad", doc[otadAt:otactlAt]}, {"otactl", doc[otactlAt:endAt]}} {
		recipe, err := os.ReadFile(c.pkg + ".yaml")
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`(?m)^\s*-? *dst: (\S+)`).FindAllStringSubmatch(string(recipe), -1) {
			dst := strings.TrimSuffix(m[1], "/")
			if strings.HasPrefix(dst, "/usr/share/doc/") || strings.HasPrefix(dst, "/usr/share/lintian/") {
				continue
			}
			if !strings.Contains(c.table, "`"+dst) {
				t.Errorf("docs/contract/packaging.md's %s table lacks %s, which the package installs", c.pkg, dst)
			}
		}
	}
}
