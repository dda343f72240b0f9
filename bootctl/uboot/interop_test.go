package uboot

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/otad/otad/bootctl"
	"github.com/otad/otad/internal/testkit/testtool"
	"github.com/otad/otad/ota"
)

const envSize = 0x4000

// layout is a test env: single copy in one file, or two copies (in two files or at
// two offsets of one file).
type layout struct {
	name      string
	redundant bool
	sameFile  bool
}

var layouts = []layout{
	{"single", false, false},
	{"redundant-two-files", true, false},
	{"redundant-one-file", true, true},
}

// setup writes a config for l and initial copies built by EncodeEnv; it returns
// the config path and the copies' (path, offset).
func setup(t *testing.T, l layout, vars map[string]string) (cfg string, copies [][2]string) {
	t.Helper()
	dir := t.TempDir()
	cfg = filepath.Join(dir, "fw_env.config")
	a := filepath.Join(dir, "env0.img")
	b := filepath.Join(dir, "env1.img")
	var lines string
	switch {
	case !l.redundant:
		copies = [][2]string{{a, "0x0"}}
		// A non-zero offset inside a larger file, as on an eMMC.
		copies[0][1] = "0x2000"
		lines = fmt.Sprintf("# a comment\n%s 0x2000 0x%x\n", a, envSize)
		writeImage(t, a, 0x2000+envSize+0x1000, map[int64][]byte{0x2000: mustEncode(t, vars, false, 0)})
	case l.sameFile:
		copies = [][2]string{{a, "0x0"}, {a, fmt.Sprintf("0x%x", envSize)}}
		lines = fmt.Sprintf("%s 0x0 0x%x 0x%x\n%s 0x%x 0x%x 0x%x\n", a, envSize, envSize, a, envSize, envSize, envSize)
		writeImage(t, a, 2*envSize, map[int64][]byte{0: mustEncode(t, vars, true, 1), envSize: mustEncode(t, vars, true, 0)})
	default:
		copies = [][2]string{{a, "0x0"}, {b, "0x0"}}
		lines = fmt.Sprintf("%s 0 %x\n%s 0 %x\n", a, envSize, b, envSize)
		writeImage(t, a, envSize, map[int64][]byte{0: mustEncode(t, vars, true, 1)})
		writeImage(t, b, envSize, map[int64][]byte{0: mustEncode(t, vars, true, 0)})
	}
	if err := os.WriteFile(cfg, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfg, copies
}

func mustEncode(t *testing.T, vars map[string]string, red bool, flags byte) []byte {
	t.Helper()
	b, err := EncodeEnv(vars, envSize, red, flags)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeImage(t *testing.T, path string, size int64, at map[int64][]byte) {
	t.Helper()
	buf := make([]byte, size)
	for i := range buf {
		buf[i] = 0xa5 // not a valid env anywhere
	}
	for off, b := range at {
		copy(buf[off:], b)
	}
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		t.Fatal(err)
	}
}

func fwPrintenv(t *testing.T, cfg string) map[string]string {
	t.Helper()
	tool := testtool.Require(t, "fw_printenv", "libubootenv-tool")
	out, err := exec.Command(tool, "-c", cfg).CombinedOutput()
	if err != nil {
		t.Fatalf("fw_printenv -c %s: %v\n%s", cfg, err, out)
	}
	vars := map[string]string{}
	for _, l := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		if strings.HasPrefix(l, "Environment ") { // debug builds print the copy in use
			continue
		}
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			t.Fatalf("fw_printenv line %q", l)
		}
		vars[k] = v
	}
	return vars
}

func fwSetenv(t *testing.T, cfg string, args ...string) {
	t.Helper()
	tool := testtool.Require(t, "fw_setenv", "libubootenv-tool")
	out, err := exec.Command(tool, append([]string{"-c", cfg}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("fw_setenv -c %s %v: %v\n%s", cfg, args, err, out)
	}
}

func testOpen(t *testing.T, cfg string) *Env {
	t.Helper()
	e, err := Open(cfg, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	return e.WithLockFile(filepath.Join(t.TempDir(), "lock"))
}

// forEachLayout runs test once for each layout, on an env set up with vars and
// opened.
func forEachLayout(t *testing.T, vars map[string]string, test func(t *testing.T, cfg string, e *Env)) {
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			cfg, _ := setup(t, l, vars)
			test(t, cfg, testOpen(t, cfg))
		})
	}
}

var base = map[string]string{
	"bootcmd":     "run distro_bootcmd",
	"BOOT_ORDER":  "A B",
	"BOOT_A_LEFT": "3",
	"BOOT_B_LEFT": "3",
	"spaces":      "a b  c=d",
}

func TestOurWritesReadByFwPrintenv(t *testing.T) {
	forEachLayout(t, base, func(t *testing.T, cfg string, e *Env) {
		ctx := t.Context()
		// Ten attempts are written "a", as RAUC's %x does.
		e10, err := Open(cfg, 10, nil)
		if err != nil {
			t.Fatal(err)
		}
		e10.WithLockFile(filepath.Join(t.TempDir(), "lock"))
		// Several writes so a redundant env alternates copies and bumps flags.
		// Mark bad takes the slot out of BOOT_ORDER, mark active puts it first.
		steps := []struct {
			mark func(context.Context, ota.Slot) error
			slot ota.Slot
		}{{e.MarkBad, "B"}, {e.MarkActive, "B"}, {e.MarkGood, "B"}, {e.MarkBad, "A"}, {e10.MarkGood, "B"}}
		want := maps.Clone(base)
		for i, s := range steps {
			if err := s.mark(ctx, s.slot); err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			switch i {
			case 0:
				want["BOOT_B_LEFT"], want["BOOT_ORDER"] = "0", "A"
			case 1:
				want["BOOT_B_LEFT"], want["BOOT_ORDER"] = "3", "B A"
			case 2:
			case 3:
				want["BOOT_A_LEFT"], want["BOOT_ORDER"] = "0", "B"
			case 4:
				want["BOOT_B_LEFT"] = "a"
			}
			if got := fwPrintenv(t, cfg); !maps.Equal(got, want) {
				t.Fatalf("step %d: fw_printenv = %v, want %v", i, got, want)
			}
		}
		st, err := e.State(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Primary() != "B" || st.Slots["A"].Bootable || st.Slots["B"].AttemptsLeft != 10 || len(st.Order) != 1 {
			t.Fatalf("state %+v", st)
		}
	})
}

func TestFwSetenvWritesReadByUs(t *testing.T) {
	forEachLayout(t, base, func(t *testing.T, cfg string, e *Env) {
		ctx := t.Context()
		want := maps.Clone(base)
		for i, kv := range [][2]string{{"BOOT_ORDER", "B A"}, {"BOOT_B_LEFT", "1"}, {"newvar", "x=y z"}, {"bootcmd", ""}} {
			args := []string{kv[0]}
			if kv[1] != "" {
				args = append(args, kv[1])
				want[kv[0]] = kv[1]
			} else {
				delete(want, kv[0])
			}
			fwSetenv(t, cfg, args...)
			snap, err := e.Load(ctx)
			if err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			if !maps.Equal(snap.Vars, want) {
				t.Fatalf("step %d: got %v, want %v", i, snap.Vars, want)
			}
			if len(snap.Corrupt) != 0 {
				t.Fatalf("step %d: corrupt copies after fw_setenv: %v", i, snap.Corrupt)
			}
		}
		// And we can keep writing on top of what fw_setenv wrote, and it reads ours.
		if err := e.MarkActive(ctx, "A"); err != nil {
			t.Fatal(err)
		}
		want["BOOT_ORDER"], want["BOOT_A_LEFT"] = "A B", "3"
		if got := fwPrintenv(t, cfg); !maps.Equal(got, want) {
			t.Fatalf("fw_printenv = %v, want %v", got, want)
		}
	})
}

func TestMkenvimageParsed(t *testing.T) {
	mk := testtool.Require(t, "mkenvimage", "u-boot-tools")
	dir := t.TempDir()
	txt := filepath.Join(dir, "vars.txt")
	if err := os.WriteFile(txt, []byte("# comment\nBOOT_ORDER=B A\nBOOT_A_LEFT=2\n\nbootargs=console=ttyS0 quiet\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"BOOT_ORDER": "B A", "BOOT_A_LEFT": "2", "bootargs": "console=ttyS0 quiet"}
	for _, tc := range []struct {
		red  bool
		args []string
	}{{false, nil}, {true, []string{"-r"}}, {false, []string{"-p", "0"}}} {
		img := filepath.Join(dir, fmt.Sprintf("env-%v-%d.img", tc.red, len(tc.args)))
		args := append([]string{"-s", fmt.Sprintf("0x%x", envSize)}, tc.args...)
		args = append(args, "-o", img, txt)
		if out, err := exec.Command(mk, args...).CombinedOutput(); err != nil {
			t.Fatalf("mkenvimage %v: %v\n%s", args, err, out)
		}
		buf, err := os.ReadFile(img)
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := ParseEnv(buf, tc.red)
		if err != nil {
			t.Fatalf("mkenvimage %v: %v", args, err)
		}
		if !maps.Equal(got, want) {
			t.Fatalf("mkenvimage %v: got %v, want %v", args, got, want)
		}
		// Through Open as well, and our write is read back by fw_printenv.
		cfg := filepath.Join(dir, "cfg")
		lines := fmt.Sprintf("%s 0x0 0x%x\n", img, envSize)
		if tc.red {
			img2 := img + ".2"
			if err := os.WriteFile(img2, make([]byte, envSize), 0o644); err != nil {
				t.Fatal(err)
			}
			lines += fmt.Sprintf("%s 0x0 0x%x\n", img2, envSize)
		}
		if err := os.WriteFile(cfg, []byte(lines), 0o644); err != nil {
			t.Fatal(err)
		}
		e := testOpen(t, cfg)
		if err := e.MarkGood(context.Background(), "B"); err != nil {
			t.Fatal(err)
		}
		want2 := maps.Clone(want)
		want2["BOOT_B_LEFT"] = "3"
		if got := fwPrintenv(t, cfg); !maps.Equal(got, want2) {
			t.Fatalf("fw_printenv after our write: %v, want %v", got, want2)
		}
	}
}

// corrupt damages copy i: a torn write (the data half new, half zero) breaks its CRC.
func corrupt(t *testing.T, c [2]string, how string) {
	t.Helper()
	f, err := os.OpenFile(c[0], os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var off int64
	fmt.Sscanf(c[1], "0x%x", &off)
	switch how {
	case "crc":
		_, err = f.WriteAt([]byte{0xde, 0xad}, off)
	case "truncated-data":
		// Only the first bytes of a write landed; the rest reads as erased flash.
		ff := make([]byte, envSize-16)
		for i := range ff {
			ff[i] = 0xff
		}
		_, err = f.WriteAt(ff, off+16)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func TestRedundantOneCorruptCopy(t *testing.T) {
	for _, l := range layouts[1:] {
		for _, how := range []string{"crc", "truncated-data"} {
			for bad := 0; bad < 2; bad++ {
				t.Run(fmt.Sprintf("%s/%s/copy%d", l.name, how, bad), func(t *testing.T) {
					ctx := context.Background()
					cfg, copies := setup(t, l, base)
					e := testOpen(t, cfg)
					// Make the copies differ: after one write, copy 1 holds BOOT_B_LEFT=0.
					if err := e.MarkBad(ctx, "B"); err != nil {
						t.Fatal(err)
					}
					newer := 1 // setup gave copy 0 flags 1, copy 1 flags 0; the write went to copy 1
					corrupt(t, copies[bad], how)
					snap, err := e.Load(ctx)
					if err != nil {
						t.Fatal(err)
					}
					if len(snap.Corrupt) != 1 || snap.Corrupt[0].Copy != bad || !errors.Is(snap.Corrupt[0].Err, bootctl.ErrBadEnv) {
						t.Fatalf("corrupt report %+v", snap.Corrupt)
					}
					if snap.Copy != 1-bad {
						t.Fatalf("used copy %d, want %d", snap.Copy, 1-bad)
					}
					wantB := "0"
					if bad == newer {
						wantB = "3" // the torn copy was the newer one: back to the older state
					}
					if snap.Vars["BOOT_B_LEFT"] != wantB || snap.Vars["bootcmd"] != base["bootcmd"] {
						t.Fatalf("vars %v", snap.Vars)
					}
					// fw_printenv agrees on which copy is valid.
					if got := fwPrintenv(t, cfg); !maps.Equal(got, snap.Vars) {
						t.Fatalf("fw_printenv %v, we %v", got, snap.Vars)
					}
					// The next write repairs the corrupt copy and keeps the good one.
					if err := e.MarkGood(ctx, "A"); err != nil {
						t.Fatal(err)
					}
					snap2, err := e.Load(ctx)
					if err != nil {
						t.Fatal(err)
					}
					if len(snap2.Corrupt) != 0 || snap2.Copy != bad {
						t.Fatalf("after repair: %+v", snap2)
					}
				})
			}
		}
	}
}

func TestBothCopiesCorrupt(t *testing.T) {
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			cfg, copies := setup(t, l, base)
			for _, c := range copies {
				corrupt(t, c, "crc")
			}
			e := testOpen(t, cfg)
			_, err := e.State(context.Background())
			if !errors.Is(err, bootctl.ErrBadEnv) {
				t.Fatalf("err = %v, want ErrBadEnv", err)
			}
			if !strings.Contains(err.Error(), cfg) || !strings.Contains(err.Error(), copies[0][0]) {
				t.Fatalf("error does not name the files: %v", err)
			}
			if err := e.MarkGood(context.Background(), "A"); !errors.Is(err, bootctl.ErrBadEnv) {
				t.Fatalf("MarkGood on a bad env: %v", err)
			}
		})
	}
}

func TestFlagsWrapAround(t *testing.T) {
	tests := []struct {
		f0, f1 byte
		want   int
	}{{0, 0, 0}, {1, 0, 0}, {1, 2, 1}, {0xff, 0, 1}, {0, 0xff, 0}, {0xfe, 0xff, 1}, {0x80, 0x7f, 0}}
	for _, tt := range tests {
		if got := newerCopy(tt.f0, tt.f1); got != tt.want {
			t.Errorf("newerCopy(%d, %d) = %d, want %d", tt.f0, tt.f1, got, tt.want)
		}
	}
	// Through the files: copy 0 at 0xff, copy 1 at 0 → copy 1 is current, and
	// fw_printenv agrees; our next write goes to copy 0 with flags 1.
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	writeImage(t, a, envSize, map[int64][]byte{0: mustEncode(t, map[string]string{"v": "old"}, true, 0xff)})
	writeImage(t, b, envSize, map[int64][]byte{0: mustEncode(t, map[string]string{"v": "new"}, true, 0)})
	cfg := filepath.Join(dir, "cfg")
	os.WriteFile(cfg, []byte(fmt.Sprintf("%s 0 0x%x\n%s 0 0x%x\n", a, envSize, b, envSize)), 0o644)
	e := testOpen(t, cfg)
	snap, err := e.Load(context.Background())
	if err != nil || snap.Vars["v"] != "new" || snap.Copy != 1 {
		t.Fatalf("%+v %v", snap, err)
	}
	if got := fwPrintenv(t, cfg); got["v"] != "new" {
		t.Fatalf("fw_printenv picked %v", got)
	}
	if err := e.MarkGood(context.Background(), "A"); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(a)
	if _, fl, err := ParseEnv(raw[:envSize], true); err != nil || fl != 1 {
		t.Fatalf("copy 0 after write: flags %d, %v", fl, err)
	}
}
