package grub

import (
	"bufio"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/otad/otad/internal/testkit/testtool"
	"github.com/otad/otad/ota"
)

const grubCfgPath = "../../packaging/bootloader/grub.cfg"

var (
	reSet      = regexp.MustCompile(`^set\s+(\w+)=(.*)$`)
	reEnvCmd   = regexp.MustCompile(`^(load_env|save_env)\s+(?:--file\s+\S+\s+)?(.*)$`)
	reFirstTok = regexp.MustCompile(`^[\w\[]+`)
)

// translateGrubCfg turns grub.cfg into POSIX sh line by line. Commands outside a
// small known set fail the test, so the translation cannot silently drift from
// the script.
func translateGrubCfg(t *testing.T, cfg string) string {
	t.Helper()
	var out strings.Builder
	out.WriteString(`__load_env() {
  for __v in "$@"; do
    eval "__set=\${__in_$__v+x}"
    if [ -n "$__set" ]; then eval "$__v=\"\${__in_$__v}\""; fi
  done
}
__save_env() {
  echo SAVE_ENV
  for __v in "$@"; do eval "echo \"SAVE $__v=\${$__v}\""; done
}
`)
	sc := bufio.NewScanner(strings.NewReader(cfg))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		tok := reFirstTok.FindString(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
			out.WriteString("\n")
		case reSet.MatchString(line):
			m := reSet.FindStringSubmatch(line)
			out.WriteString(m[1] + "=" + m[2] + "\n")
		case reEnvCmd.MatchString(line):
			m := reEnvCmd.FindStringSubmatch(line)
			out.WriteString("__" + m[1] + " " + m[2] + "\n")
		case tok == "if" || tok == "elif" || tok == "for" || line == "else" || line == "fi" || line == "done" || tok == "echo":
			out.WriteString(line + "\n")
		case tok == "serial" || tok == "terminal_input" || tok == "terminal_output" || tok == "insmod" || tok == "sleep":
			out.WriteString(":\n")
		case tok == "linux" || tok == "initrd":
			out.WriteString(fmt.Sprintf("echo \"%s %s\"\n", strings.ToUpper(tok), strings.TrimSpace(strings.TrimPrefix(line, tok))))
		case line == "boot" || line == "halt" || line == "reboot":
			out.WriteString(fmt.Sprintf("echo %s; exit 0\n", strings.ToUpper(line)))
		default:
			t.Fatalf("%s:%d: the test cannot translate %q; extend translateGrubCfg", grubCfgPath, n, line)
		}
	}
	return out.String()
}

type cfgRun struct {
	slot       ota.Slot
	linux, end string
	saved      map[string]string
	out        string
}

func runGrubCfg(t *testing.T, file string, vars map[string]string) cfgRun {
	t.Helper()
	env := []string{"prefix=(hd0,gpt1)/EFI/BOOT"}
	for k, v := range vars {
		env = append(env, "__in_"+k+"="+v)
	}
	r := cfgRun{out: testtool.Sh(t, file, env...)}
	for _, l := range strings.Split(r.out, "\n") {
		switch {
		case l == "SAVE_ENV":
			r.saved = map[string]string{}
		case strings.HasPrefix(l, "SAVE "):
			k, v, _ := strings.Cut(strings.TrimPrefix(l, "SAVE "), "=")
			r.saved[k] = v
		case strings.HasPrefix(l, "LINUX "):
			r.linux = l
			for _, f := range strings.Fields(l) {
				if v, ok := strings.CutPrefix(f, "otad.slot="); ok {
					r.slot = ota.Slot(v)
				}
			}
		case l == "BOOT" || l == "HALT" || l == "REBOOT":
			r.end = l
		}
	}
	return r
}

func TestGrubCfgMatchesPick(t *testing.T) {
	src, err := os.ReadFile(grubCfgPath)
	if err != nil {
		t.Fatal(err)
	}
	sh := testtool.WriteFile(t, filepath.Join(t.TempDir(), "grub.sh"), []byte(translateGrubCfg(t, string(src))))
	orders := []string{"-", "A B", "B A", "A", "B", "B B", "", "C", "A  ", "B  ", " "}
	vals := []string{"-", "0", "1"}
	var cases []map[string]string
	for _, o := range orders {
		for _, aok := range vals {
			for _, atry := range vals {
				for _, bok := range vals {
					for _, btry := range vals {
						v := map[string]string{"saved_entry": "x"}
						for k, val := range map[string]string{"ORDER": o, "A_OK": aok, "A_TRY": atry, "B_OK": bok, "B_TRY": btry} {
							if val != "-" {
								v[k] = val
							}
						}
						cases = append(cases, v)
					}
				}
			}
		}
	}
	step := 1
	if testing.Short() {
		step = 11
	}
	for i := 0; i < len(cases); i += step {
		vars := cases[i]
		name := fmt.Sprintf("%v", vars)
		wantSlot, wantVars := Pick(vars)
		got := runGrubCfg(t, sh, vars)
		if got.slot != wantSlot {
			t.Fatalf("%s: grub.cfg boots %q, Pick %q\n%s", name, got.slot, wantSlot, got.out)
		}
		if wantSlot == "" {
			if got.end != "HALT" || got.saved != nil {
				t.Fatalf("%s: no slot: want a halt without save_env, got %q saved=%v", name, got.end, got.saved)
			}
			if !maps.Equal(wantVars, vars) {
				t.Fatalf("%s: Pick changed the env without booting: %v", name, wantVars)
			}
			continue
		}
		if got.end != "BOOT" {
			t.Fatalf("%s: script ended with %q", name, got.end)
		}
		for _, k := range schemeVars() {
			if got.saved[k] != wantVars[k] {
				t.Fatalf("%s: saved %s=%q, Pick %q\n%s", name, k, got.saved[k], wantVars[k], got.out)
			}
		}
		part := map[ota.Slot]string{"A": "2", "B": "3"}[wantSlot]
		for _, want := range []string{"(hd0,gpt" + part + ")/boot/vmlinuz", "root=/dev/vda" + part, "rauc.slot=" + string(wantSlot), "console=ttyS0"} {
			if !strings.Contains(got.linux, want) {
				t.Fatalf("%s: linux line %q lacks %q", name, got.linux, want)
			}
		}
	}
}
