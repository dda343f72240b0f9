package uboot

import (
	"bufio"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/otad/otad/internal/testkit/testtool"
	"github.com/otad/otad/ota"
)

const bootCmdPath = "../../packaging/bootloader/boot.cmd"

var (
	reSetenvVal  = regexp.MustCompile(`^setenv\s+(\w+)\s+(.*)$`)
	reSetenvDel  = regexp.MustCompile(`^setenv\s+(\w+)\s*$`)
	reSetexprSub = regexp.MustCompile(`^setexpr\s+(\w+)\s+(\S+)\s+-\s+(\S+)\s*$`)
	reFirstWord  = regexp.MustCompile(`^[A-Za-z_][\w.]*`)
	reIfThen     = regexp.MustCompile(`^(if|elif)\s+(.*);\s*then$`)
	rePartUUID   = regexp.MustCompile(`^part\s+uuid\s+(\S+)\s+(\S+)\s+(\w+)$`)
)

// ubootShPrelude defines the shell functions the translated script calls:
// saveenv prints the env, and __utest / __ustrtol do what U-Boot's test does
// with numbers (simple_strtol with base 0: a 0x prefix is hex, a leading 0 octal,
// digits end at the first that does not fit the base, a leading '-' negates).
// load, part and booti print what they were asked to do.
const ubootShPrelude = `__saveenv() {
  echo "SAVEENV"
  __seen=
  for __v in $__envnames; do
    eval "__set=\${$__v+x}"
    case " $__seen " in *" $__v "*) continue;; esac
    __seen="$__seen $__v"
    if [ -n "$__set" ]; then eval "echo \"SAVE $__v=\${$__v}\""; fi
  done
}
__ustrtol() {
  __s=$1; __b=${2:-0}; __neg=
  case $__s in -*) __neg=1; __s=${__s#-};; esac
  case $__s in
    0[xX]*) __b=16; __s=${__s#??};;
    0*) [ "$__b" -ne 0 ] || __b=8;;
  esac
  [ "$__b" -ne 0 ] || __b=10
  __n=0
  while [ -n "$__s" ]; do
    case ${__s%"${__s#?}"} in
      [0-9]) __d=${__s%"${__s#?}"};;
      [aA]) __d=10;; [bB]) __d=11;; [cC]) __d=12;; [dD]) __d=13;; [eE]) __d=14;; [fF]) __d=15;;
      *) break;;
    esac
    [ "$__d" -lt "$__b" ] || break
    __n=$((__n * __b + __d))
    __s=${__s#?}
  done
  if [ -n "$__neg" ]; then echo $((-__n)); else echo "$__n"; fi
}
__utest() {
  if [ $# -eq 3 ]; then
    case $2 in -eq|-ne|-lt|-le|-gt|-ge) test "$(__ustrtol "$1")" "$2" "$(__ustrtol "$3")"; return;; esac
  fi
  test "$@"
}
__load() { echo "LOAD $*"; }
`

// translateBootCmd turns the U-Boot hush script into POSIX sh, one line at a time.
// Only a small, known command set is translated; anything else fails the test so a
// change to the script that the translation cannot follow is noticed.
func translateBootCmd(t *testing.T, script string) string {
	t.Helper()
	var out strings.Builder
	out.WriteString(ubootShPrelude)
	sc := bufio.NewScanner(strings.NewReader(script))
	for n := 1; sc.Scan(); n++ {
		raw := sc.Text()
		line := strings.TrimSpace(raw)
		if line == "" || strings.HasPrefix(line, "#") {
			out.WriteString("\n")
			continue
		}
		// "test ... || CMD": both commands are translated on their own.
		if i := strings.Index(line, " || "); i > 0 && strings.HasPrefix(line, "test ") {
			out.WriteString(translateCmd(t, n, line[:i]) + " || " + translateCmd(t, n, line[i+4:]) + "\n")
			continue
		}
		// "if CMD; then" / "elif CMD; then": the condition is a command too.
		if m := reIfThen.FindStringSubmatch(line); m != nil {
			out.WriteString(m[1] + " " + translateCmd(t, n, m[2]) + "; then\n")
			continue
		}
		out.WriteString(translateCmd(t, n, line) + "\n")
	}
	return out.String()
}

func translateCmd(t *testing.T, n int, line string) string {
	t.Helper()
	word := reFirstWord.FindString(line)
	switch {
	case strings.HasPrefix(line, "if ") || strings.HasPrefix(line, "elif ") || strings.HasPrefix(line, "for "):
		return line
	case line == "fi" || line == "done" || line == "else" || line == "then" || line == "do":
		return line
	case reSetenvDel.MatchString(line):
		return "unset " + reSetenvDel.FindStringSubmatch(line)[1]
	case reSetenvVal.MatchString(line):
		m := reSetenvVal.FindStringSubmatch(line)
		v := m[2]
		if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
			v = v[1 : len(v)-1]
		}
		// Hush keeps local variables apart from the env; track which names are env
		// so __saveenv stores only those.
		return fmt.Sprintf(`%s="%s"; __envnames="$__envnames %s"`, m[1], v, m[1])
	case reSetexprSub.MatchString(line):
		// U-Boot's setexpr reads hex (simple_strtoul base 16) and prints %lx.
		m := reSetexprSub.FindStringSubmatch(line)
		return fmt.Sprintf(`%s=$(printf %%x $(( $(__ustrtol "%s" 16) - $(__ustrtol "%s" 16) ))); __envnames="$__envnames %s"`, m[1], m[2], m[3], m[1])
	case rePartUUID.MatchString(line):
		// part uuid DEV NUM:PART VAR sets the env variable VAR to the partition's UUID.
		m := rePartUUID.FindStringSubmatch(line)
		return fmt.Sprintf(`%s="partuuid-%s-%s"; __envnames="$__envnames %s"`, m[3], m[1], m[2], m[3])
	case line == "saveenv":
		return "__saveenv"
	case line == "reset":
		return "echo RESET; exit 0"
	case word == "test":
		return "__utest" + strings.TrimPrefix(line, "test")
	case word == "echo":
		return line
	case word == "load":
		return "__load" + strings.TrimPrefix(line, "load")
	case word == "booti" || word == "bootz" || word == "bootm":
		return fmt.Sprintf(`echo "BOOT bootargs=${bootargs}"; echo "BOOTCMD %s"%s; exit 0`, word, strings.TrimPrefix(line, word))
	case regexp.MustCompile(`^\w+=\S*$`).MatchString(line): // hush local variable
		return line
	}
	t.Fatalf("%s:%d: the test cannot translate %q; extend translateCmd", bootCmdPath, n, line)
	return ""
}

type scriptRun struct {
	slot     ota.Slot          // from rauc.slot= in bootargs
	bootargs string            // the kernel command line
	loads    []string          // the load commands' arguments, in order
	bootcmd  string            // "booti ADDR INITRD FDT"
	saved    map[string]string // the env as last saved
	resets   int
	out      string
}

// runBootCmd runs the translated script like a board would: on RESET the script runs
// again from the saved env.
func runBootCmd(t *testing.T, sh string, vars map[string]string) scriptRun {
	t.Helper()
	file := testtool.WriteFile(t, filepath.Join(t.TempDir(), "boot.sh"), []byte(sh))
	env := vars
	var run scriptRun
	for boot := 0; boot < 4; boot++ {
		var shEnv []string
		names := ""
		for k, v := range env {
			shEnv = append(shEnv, k+"="+v)
			names += " " + k
		}
		stdout := testtool.Sh(t, file, append(shEnv, "__envnames="+names)...)
		run.out += stdout
		run.loads = nil
		saved := map[string]string(nil)
		reset := false
		for _, l := range strings.Split(stdout, "\n") {
			switch {
			case l == "SAVEENV":
				saved = map[string]string{}
			case strings.HasPrefix(l, "SAVE "):
				k, v, _ := strings.Cut(strings.TrimPrefix(l, "SAVE "), "=")
				saved[k] = v
			case l == "RESET":
				reset = true
			case strings.HasPrefix(l, "BOOT bootargs="):
				run.bootargs = strings.TrimPrefix(l, "BOOT bootargs=")
				for _, f := range strings.Fields(run.bootargs) {
					if v, ok := strings.CutPrefix(f, "rauc.slot="); ok {
						run.slot = ota.Slot(v)
					}
				}
			case strings.HasPrefix(l, "BOOTCMD "):
				run.bootcmd = strings.Join(strings.Fields(strings.TrimPrefix(l, "BOOTCMD ")), " ")
			case strings.HasPrefix(l, "LOAD "):
				run.loads = append(run.loads, strings.TrimPrefix(l, "LOAD "))
			}
		}
		if saved == nil {
			t.Fatalf("the script never ran saveenv:\n%s", stdout)
		}
		run.saved = saved
		if !reset {
			return run
		}
		run.resets++
		env = map[string]string{}
		for k, v := range saved {
			env[k] = v
		}
		for k, v := range vars { // the rest of the env is unchanged by a reset
			if _, ok := saved[k]; !ok && !strings.HasPrefix(k, "BOOT_") {
				env[k] = v
			}
		}
	}
	t.Fatalf("the script kept resetting:\n%s", run.out)
	return run
}

func TestBootCmdMatchesPick(t *testing.T) {
	src, err := os.ReadFile(bootCmdPath)
	if err != nil {
		t.Fatal(err)
	}
	const attempts = 3
	if !strings.Contains(string(src), fmt.Sprintf("setenv BOOT_A_LEFT %d", attempts)) {
		t.Fatalf("%s: the default attempts are no longer %d; update this test", bootCmdPath, attempts)
	}
	sh := translateBootCmd(t, string(src))

	orders := []string{"", "A B", "B A", "A", "B", "B B", "C", "A  B", "C B", "B C"}
	// Counters in hex as RAUC writes them ("a", "10"), and junk U-Boot reads as 0
	// ("x", "-1", and "0x3", which the script's 0x${...} turns into "0x0x3").
	lefts := []string{"", "0", "1", "3", "9", "a", "10", "x", "-1", "0x3"}
	type tc struct{ vars map[string]string }
	var cases []tc
	for _, o := range orders {
		for _, a := range lefts {
			for _, b := range lefts {
				v := map[string]string{"other": "keep me"}
				maps.Copy(v, ubootBoard(len(cases)%3))
				if o != "" {
					v["BOOT_ORDER"] = o
				}
				if a != "" {
					v["BOOT_A_LEFT"] = a
				}
				if b != "" {
					v["BOOT_B_LEFT"] = b
				}
				cases = append(cases, tc{v})
			}
		}
	}
	// Running sh for every combination is slow on 2 cores; take a deterministic
	// subset in -short mode.
	step := 1
	if testing.Short() {
		step = 7
	}
	checked := 0
	for i := 0; i < len(cases); i += step {
		c := cases[i]
		name := fmt.Sprintf("order=%q/A=%q/B=%q", c.vars["BOOT_ORDER"], c.vars["BOOT_A_LEFT"], c.vars["BOOT_B_LEFT"])
		wantSlot, wantVars := Pick(c.vars, attempts)
		if wantSlot == "" {
			continue // BOOT_ORDER without any slot: U-Boot resets forever; checked below
		}
		got := runBootCmd(t, sh, c.vars)
		if got.slot != wantSlot {
			t.Errorf("%s: script booted %q, Pick %q\n%s", name, got.slot, wantSlot, got.out)
			continue
		}
		for _, k := range []string{"BOOT_ORDER", "BOOT_A_LEFT", "BOOT_B_LEFT"} {
			if got.saved[k] != wantVars[k] {
				t.Errorf("%s: script saved %s=%q, Pick %q", name, k, got.saved[k], wantVars[k])
			}
		}
		for _, k := range []string{"otad_slot", "otad_part", "otad_partuuid", "otad_fdt", "otad_initrd", "bootargs"} {
			if _, ok := got.saved[k]; ok {
				t.Errorf("%s: the script saved its scratch variable %s", name, k)
			}
		}
		checkBootsSlot(t, name, c.vars, got)
		if wantVars["other"] != "keep me" {
			t.Errorf("%s: Pick changed an unrelated variable", name)
		}
		checked++
	}
	if checked < 20 {
		t.Fatalf("only %d cases compared", checked)
	}
}

// ubootBoard is the part of the environment the script reads to boot, as
// U-Boot's qemu_arm64 board sets it, in three variants: 0, run by distro boot
// (devtype and devnum say where the script came from); 1, run otherwise (the
// script boots from mmc 0); 2, as 1 on a board that names its device tree file.
func ubootBoard(variant int) map[string]string {
	v := map[string]string{"kernel_addr_r": "0x40400000", "ramdisk_addr_r": "0x44000000",
		"fdtcontroladdr": "5edb6db0", "filesize": "5d2acf", "otad_bootargs": "panic=-1"}
	switch variant {
	case 0:
		v["devtype"], v["devnum"] = "virtio", "1"
	case 2:
		v["fdtfile"], v["fdt_addr_r"] = "vendor/board.dtb", "0x40000000"
	}
	return v
}

// checkBootsSlot checks how the script boots the slot it picked: the kernel,
// the device tree the board names and the initramfs from the slot's partition
// (A: 2, B: 3) of the device, root= by that partition's UUID, the slot on the
// command line, else U-Boot's own device tree.
func checkBootsSlot(t *testing.T, name string, vars map[string]string, got scriptRun) {
	t.Helper()
	part := map[ota.Slot]string{ota.SlotA: "2", ota.SlotB: "3"}[got.slot]
	devtype, devnum := "mmc", "0"
	if vars["devtype"] != "" {
		devtype, devnum = vars["devtype"], vars["devnum"]
	}
	wantLoads := []string{fmt.Sprintf("%s %s:%s 0x40400000 /boot/Image", devtype, devnum, part)}
	fdt := "5edb6db0"
	if vars["fdtfile"] != "" {
		wantLoads = append(wantLoads, fmt.Sprintf("%s %s:%s 0x40000000 /boot/%s", devtype, devnum, part, vars["fdtfile"]))
		fdt = "0x40000000"
	}
	wantLoads = append(wantLoads, fmt.Sprintf("%s %s:%s 0x44000000 /boot/initrd.img", devtype, devnum, part))
	wantArgs := fmt.Sprintf("panic=-1 root=PARTUUID=partuuid-%s-%s:%s rootwait otad.slot=%s rauc.slot=%s", devtype, devnum, part, got.slot, got.slot)
	wantBoot := "booti 0x40400000 0x44000000:5d2acf " + fdt
	if fmt.Sprint(got.loads) != fmt.Sprint(wantLoads) || got.bootargs != wantArgs || got.bootcmd != wantBoot {
		t.Errorf("%s: slot %s booted with loads %q, bootargs %q, %q; want %q, %q, %q",
			name, got.slot, got.loads, got.bootargs, got.bootcmd, wantLoads, wantArgs, wantBoot)
	}
}

// A BOOT_ORDER naming no slot makes the script reset again and again; Pick
// reports it as "" so the sim can refuse to boot.
func TestPickNoSlotInOrder(t *testing.T) {
	slot, nv := Pick(map[string]string{"BOOT_ORDER": "C D"}, 3)
	if slot != "" {
		t.Fatalf("slot = %q, want none", slot)
	}
	if nv["BOOT_A_LEFT"] != "3" || nv["BOOT_B_LEFT"] != "3" {
		t.Fatalf("counters not reset: %v", nv)
	}
}

func TestBootCmdBuildsWithMkimage(t *testing.T) {
	mk := testtool.Require(t, "mkimage", "u-boot-tools")
	out := filepath.Join(t.TempDir(), "boot.scr")
	b, err := exec.Command(mk, "-A", "arm64", "-T", "script", "-C", "none", "-d", bootCmdPath, out).CombinedOutput()
	if err != nil {
		t.Fatalf("mkimage: %v\n%s", err, b)
	}
}

func TestPickTable(t *testing.T) {
	tests := []struct {
		name     string
		vars     map[string]string
		wantSlot ota.Slot
		wantA    string
		wantB    string
		wantOrd  string
	}{
		{"fresh env", map[string]string{}, "A", "2", "3", "A B"},
		{"B first", map[string]string{"BOOT_ORDER": "B A", "BOOT_A_LEFT": "3", "BOOT_B_LEFT": "3"}, "B", "3", "2", "B A"},
		{"B exhausted falls back", map[string]string{"BOOT_ORDER": "B A", "BOOT_A_LEFT": "3", "BOOT_B_LEFT": "0"}, "A", "2", "0", "B A"},
		{"both exhausted reset", map[string]string{"BOOT_ORDER": "B A", "BOOT_A_LEFT": "0", "BOOT_B_LEFT": "0"}, "B", "3", "2", "B A"},
		{"hex countdown like setexpr", map[string]string{"BOOT_A_LEFT": "10"}, "A", "f", "3", "A B"},
		{"ten attempts are a", map[string]string{"BOOT_A_LEFT": "a"}, "A", "9", "3", "A B"},
		{"a slot out of the order never boots", map[string]string{"BOOT_ORDER": "A", "BOOT_A_LEFT": "0", "BOOT_B_LEFT": "3"}, "A", "2", "3", "A"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			slot, nv := Pick(tt.vars, 3)
			if slot != tt.wantSlot || nv["BOOT_A_LEFT"] != tt.wantA || nv["BOOT_B_LEFT"] != tt.wantB || nv["BOOT_ORDER"] != tt.wantOrd {
				keys := make([]string, 0, len(nv))
				for k := range nv {
					keys = append(keys, k+"="+nv[k])
				}
				sort.Strings(keys)
				t.Fatalf("got %q %v, want %q A=%s B=%s order=%s", slot, keys, tt.wantSlot, tt.wantA, tt.wantB, tt.wantOrd)
			}
			if len(tt.vars) > 0 && tt.vars["BOOT_A_LEFT"] == tt.wantA && tt.wantSlot == "A" {
				t.Fatal("input map was modified")
			}
		})
	}
}
