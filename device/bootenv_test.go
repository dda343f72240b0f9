package device

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/internal/testkit/devicetest"
	"github.com/otad/otad/internal/testkit/testtool"
	"github.com/otad/otad/ota"
)

// Issue 9: a U-Boot env never saved at the factory, or with both copies
// corrupt, does not crash-loop `otad run`: it exits 5 (not restarted by the
// unit) saying what to run, and what it says to run fixes it.
func TestUnreadableBootEnv(t *testing.T) {
	fwSetenv := testtool.Require(t, "fw_setenv", "libubootenv-tool")
	for _, c := range []struct {
		name   string
		copies int
		fill   byte
	}{{"never saved", 1, 0xff}, {"both copies bad CRC", 2, 0x5a}} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			var lines []string
			for i := range c.copies {
				env := filepath.Join(dir, "env"+string(rune('0'+i)))
				devicetest.Must(t, os.WriteFile(env, []byte(strings.Repeat(string(rune(c.fill)), 0x2000)), 0o600))
				lines = append(lines, env+" 0x0 0x2000")
			}
			fwConfig := filepath.Join(dir, "fw_env.config")
			devicetest.Must(t, os.WriteFile(fwConfig, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
			for _, s := range []string{"a", "b"} {
				devicetest.Must(t, os.WriteFile(filepath.Join(dir, s), make([]byte, 1<<20), 0o600))
			}
			os.MkdirAll(filepath.Join(dir, "keys"), 0o700)
			cfg := writeConfig(t, dir, "root=/dev/x otad.slot=A\n", "A = \""+dir+"/a\"\nB = \""+dir+"/b\"\n",
				"[trust]\nkeys_dir = \""+dir+"/keys\"\n[bootloader]\ntype = \"uboot\"\nenv_config = \""+fwConfig+"\"\n")
			code, _, stderr := otad(t, "run", "-c", cfg)
			if code != ota.ExitNeedsOperator || !strings.Contains(stderr, "fw_setenv -c "+fwConfig) {
				t.Fatalf("exit %d, want %d naming fw_setenv:\n%s", code, ota.ExitNeedsOperator, stderr)
			}
			// Run what it says, with this test's stand-in for U-Boot's default environment.
			var fix string
			for _, l := range strings.Split(stderr, "\n") {
				if strings.HasPrefix(strings.TrimSpace(l), "fw_setenv -c "+fwConfig+" -f ") {
					fix = strings.TrimSpace(l)
				}
			}
			defaults := filepath.Join(dir, "u-boot-initial-env")
			devicetest.Must(t, os.WriteFile(defaults, []byte("bootcmd=run distro_bootcmd\n"), 0o600))
			fix = strings.Replace(fix, "/etc/u-boot-initial-env", defaults, 1)
			out, err := exec.Command("sh", "-c", strings.Replace(fix, "fw_setenv", fwSetenv, 1)).CombinedOutput()
			if err != nil {
				t.Fatalf("%s: %v: %s", fix, err, out)
			}
			if code, out, stderr := otad(t, "status", "-c", cfg); code != 0 {
				t.Fatalf("status after the fix: exit %d %s %s", code, out, stderr)
			}
			// otad starts now: a short run ends by itself only if it failed.
			d := exec.Command(otadBin, "run", "-c", cfg)
			var log testtool.Buffer
			d.Stderr = &log
			devicetest.Must(t, d.Start())
			defer func() { d.Process.Kill(); d.Wait() }()
			for i := 0; !strings.Contains(log.String(), "agent started on slot A"); i++ {
				if i > 400 {
					t.Fatalf("otad did not start after the fix:\n%s", log.String())
				}
				time.Sleep(25 * time.Millisecond)
			}
			if strings.Contains(log.String(), "effect failed") {
				t.Fatalf("the bootloader still fails:\n%s", log.String())
			}
		})
	}
}
