package device

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/bootctl/grub"
	"github.com/otad/otad/bootctl/uboot"
	"github.com/otad/otad/internal/testkit/devicetest"
	"github.com/otad/otad/internal/testkit/signer"
	"github.com/otad/otad/ota"
)

// startupDevice is a device on files in dir that otad run starts on: slot
// files, the kernel command line, a U-Boot environment (fw_env.config) or a
// grubenv, a trusted key. A case breaks one thing.
type startupDevice struct {
	dir        string
	bootloader string // uboot or grub
	cmdline    string
	extra      string // more config
}

func (d startupDevice) write(t *testing.T) string {
	t.Helper()
	for _, s := range []string{"a", "b"} {
		devicetest.Must(t, os.WriteFile(filepath.Join(d.dir, s), make([]byte, 1<<20), 0o600))
	}
	keys := filepath.Join(d.dir, "keys")
	devicetest.Must(t, os.MkdirAll(keys, 0o700))
	rel, err := signer.New()
	devicetest.Must(t, err)
	devicetest.Must(t, os.WriteFile(filepath.Join(keys, "release.pub"), rel.PublicKeyPEM, 0o644))
	var section string
	switch d.bootloader {
	case "uboot":
		env, err := uboot.EncodeEnv(map[string]string{"BOOT_ORDER": "A B", "BOOT_A_LEFT": "3", "BOOT_B_LEFT": "3"}, 0x2000, false, 0)
		devicetest.Must(t, err)
		devicetest.Must(t, os.WriteFile(filepath.Join(d.dir, "env"), env, 0o600))
		fw := filepath.Join(d.dir, "fw_env.config")
		devicetest.Must(t, os.WriteFile(fw, []byte(filepath.Join(d.dir, "env")+" 0x0 0x2000\n"), 0o600))
		section = "[bootloader]\ntype = \"uboot\"\nenv_config = \"" + fw + "\"\n"
	case "grub":
		env, err := grub.EncodeEnv(map[string]string{"ORDER": "A B", "A_OK": "1", "A_TRY": "0", "B_OK": "0", "B_TRY": "0"})
		devicetest.Must(t, err)
		devicetest.Must(t, os.WriteFile(filepath.Join(d.dir, "grubenv"), env, 0o600))
		section = "[bootloader]\ntype = \"grub\"\nenv_file = \"" + d.dir + "/grubenv\"\n"
	}
	cmdline := d.cmdline
	if cmdline == "" {
		cmdline = "console=ttyS0 otad.slot=A\n"
	}
	return writeConfig(t, d.dir, cmdline, "A = \""+d.dir+"/a\"\nB = \""+d.dir+"/b\"\n",
		"[trust]\nkeys_dir = \""+keys+"\"\n"+section+"[reboot]\npolicy = \"manual\"\n"+d.extra)
}

// runFor runs `otad run` until it exits by itself or the wait ends (it
// started: the test fails).
func runFor(t *testing.T, cfg string, wait time.Duration) (int, string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	cmd := exec.CommandContext(ctx, otadBin, "run", "-c", cfg)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		return 0, stderr.String(), true
	}
	ee, ok := err.(*exec.ExitError)
	if err != nil && !ok {
		t.Fatal(err)
	}
	if !ok {
		return 0, stderr.String(), false
	}
	return ee.ExitCode(), stderr.String(), false
}

// Issue 17: every refusal of `otad run` before it starts is one `otad config
// check` makes too, through the same code: the same exit code, and the same
// message naming the file and the key.
func TestConfigCheckRefusesWhatRunRefuses(t *testing.T) {
	for _, c := range []struct {
		name       string
		bootloader string
		breakIt    func(t *testing.T, dir, cfg string) string // returns the config to check (cfg or a new one)
		cmdline    string
		code       int
		key        string
		says       string
	}{
		{name: "U-Boot env zeroed (never saved)", bootloader: "uboot", code: ota.ExitNeedsOperator, key: "bootloader.env_config", says: "fw_setenv -c",
			breakIt: func(t *testing.T, dir, cfg string) string {
				devicetest.Must(t, os.WriteFile(filepath.Join(dir, "env"), make([]byte, 0x2000), 0o600))
				return cfg
			}},
		{name: "U-Boot env erased flash", bootloader: "uboot", code: ota.ExitNeedsOperator, key: "bootloader.env_config", says: "no valid copy",
			breakIt: func(t *testing.T, dir, cfg string) string {
				devicetest.Must(t, os.WriteFile(filepath.Join(dir, "env"), bytes.Repeat([]byte{0xff}, 0x2000), 0o600))
				return cfg
			}},
		{name: "fw_env.config missing", bootloader: "uboot", code: ota.ExitUsage, key: "bootloader.env_config", says: "fw_env.config",
			breakIt: func(t *testing.T, dir, cfg string) string {
				devicetest.Must(t, os.Remove(filepath.Join(dir, "fw_env.config")))
				return cfg
			}},
		{name: "grubenv corrupt", bootloader: "grub", code: ota.ExitNeedsOperator, key: "bootloader.env_file", says: "grub-editenv",
			breakIt: func(t *testing.T, dir, cfg string) string {
				devicetest.Must(t, os.WriteFile(filepath.Join(dir, "grubenv"), []byte("not a grubenv\n"), 0o600))
				return cfg
			}},
		{name: "grubenv missing", bootloader: "grub", code: ota.ExitUsage, key: "bootloader.env_file", says: "no such file",
			breakIt: func(t *testing.T, dir, cfg string) string {
				devicetest.Must(t, os.Remove(filepath.Join(dir, "grubenv")))
				return cfg
			}},
		{name: "kernel command line names no slot", bootloader: "grub", cmdline: "console=ttyS0 quiet\n",
			code: ota.ExitUsage, key: "slots.cmdline", says: "kernel command line"},
		{name: "state_dir writable by others", bootloader: "uboot", code: ota.ExitUsage, key: "state_dir", says: "chmod 0700",
			breakIt: func(t *testing.T, dir, cfg string) string {
				state := filepath.Join(dir, "state")
				devicetest.Must(t, os.MkdirAll(state, 0o700))
				devicetest.Must(t, os.Chmod(state, 0o777))
				return cfg
			}},
		{name: "state_dir a regular file", bootloader: "uboot", code: ota.ExitUsage, key: "state_dir", says: "not a directory",
			breakIt: func(t *testing.T, dir, cfg string) string {
				devicetest.Must(t, os.WriteFile(filepath.Join(dir, "state"), nil, 0o600))
				return cfg
			}},
		{name: "state_dir that cannot be created", bootloader: "grub", code: ota.ExitUsage, key: "state_dir", says: "/proc/otad-state",
			breakIt: func(t *testing.T, dir, cfg string) string {
				b, err := os.ReadFile(cfg)
				devicetest.Must(t, err)
				b = bytes.Replace(b, []byte(dir+"/state"), []byte("/proc/otad-state"), 1)
				devicetest.Must(t, os.WriteFile(cfg, b, 0o600))
				return cfg
			}},
		{name: "state_dir owned by another user", bootloader: "grub", code: ota.ExitUsage, key: "state_dir", says: "chown",
			breakIt: func(t *testing.T, dir, cfg string) string {
				if os.Geteuid() != 0 {
					t.Skip("chown to another user needs root")
				}
				state := filepath.Join(dir, "state")
				devicetest.Must(t, os.MkdirAll(state, 0o700))
				devicetest.Must(t, os.Chown(state, 4242, 4242))
				return cfg
			}},
		{name: "trust directory missing", bootloader: "grub", code: ota.ExitUsage, key: "trust.keys_dir", says: "no such file",
			breakIt: func(t *testing.T, dir, cfg string) string {
				devicetest.Must(t, os.RemoveAll(filepath.Join(dir, "keys")))
				return cfg
			}},
		{name: "download CA missing", bootloader: "grub", code: ota.ExitUsage, key: "download.ca_file", says: "ca.pem",
			breakIt: func(t *testing.T, dir, cfg string) string {
				return appendConfig(t, cfg, "[download]\nca_file = \""+dir+"/ca.pem\"\n")
			}},
		{name: "MQTT CA missing", bootloader: "grub", code: ota.ExitUsage, key: "mqtt.ca_file", says: "mqtt-ca.pem",
			breakIt: func(t *testing.T, dir, cfg string) string {
				return appendConfig(t, cfg, "[mqtt]\nbroker = \"mqtts://127.0.0.1:1\"\nca_file = \""+dir+"/mqtt-ca.pem\"\n")
			}},
		{name: "a bad value in the file", bootloader: "grub", code: ota.ExitUsage, key: "commit.window", says: "is not between 1s and 24h",
			breakIt: func(t *testing.T, dir, cfg string) string {
				return appendConfig(t, cfg, "[commit]\nwindow = \"-1s\"\n")
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := startupDevice{dir: dir, bootloader: c.bootloader, cmdline: c.cmdline}.write(t)
			if c.breakIt != nil {
				cfg = c.breakIt(t, dir, cfg)
			}
			code, stdout, stderr := otad(t, "config", "check", "-c", cfg)
			if code != c.code {
				t.Fatalf("config check: exit %d, want %d\nstdout: %s\nstderr: %s", code, c.code, stdout, stderr)
			}
			var line string // the refusal, as config check names it
			for _, l := range strings.Split(stderr, "\n") {
				if strings.HasPrefix(l, cfg+": "+c.key+": ") {
					line = l
					break
				}
			}
			if line == "" || !strings.Contains(stderr, c.says) {
				t.Fatalf("config check does not name %s: %s (saying %q):\n%s", cfg, c.key, c.says, stderr)
			}
			runCode, runErr, started := runFor(t, cfg, 20*time.Second)
			if started {
				t.Fatalf("otad run started where config check refused:\n%s", runErr)
			}
			if runCode != code || !strings.Contains(runErr, "otad: "+line) {
				t.Fatalf("otad run: exit %d, want %d as config check, with %q:\n%s", runCode, code, "otad: "+line, runErr)
			}
		})
	}
}

// What otad run starts on, config check passes; and fixing what it refused
// makes both agree again (the ordinary path of a board's first day).
func TestConfigCheckPassesWhatRunStartsOn(t *testing.T) {
	for _, bl := range []string{"uboot", "grub"} {
		t.Run(bl, func(t *testing.T) {
			dir := t.TempDir()
			cfg := startupDevice{dir: dir, bootloader: bl}.write(t)
			if code, stdout, stderr := otad(t, "config", "check", "-c", cfg); code != 0 || !strings.Contains(stdout, "is valid") {
				t.Fatalf("config check: exit %d\n%s%s", code, stdout, stderr)
			}
			_, log, started := runFor(t, cfg, 3*time.Second)
			if !started || !strings.Contains(log, "otad running") {
				t.Fatalf("otad run did not start where config check passed:\n%s", log)
			}
		})
	}
}

// A slot device that does not open: otad run starts (the booted slot must be
// committed) with a warning, and config check names it, exit 2.
func TestConfigCheckNamesWhatRunWarnsOf(t *testing.T) {
	dir := t.TempDir()
	cfg := startupDevice{dir: dir, bootloader: "grub"}.write(t)
	devicetest.Must(t, os.Remove(filepath.Join(dir, "b")))
	code, _, stderr := otad(t, "config", "check", "-c", cfg)
	if code != ota.ExitUsage || !strings.Contains(stderr, cfg+": slots.B: "+dir+"/b: ") || !strings.Contains(stderr, "otad run starts, with a warning") {
		t.Fatalf("config check: exit %d:\n%s", code, stderr)
	}
	_, log, started := runFor(t, cfg, 3*time.Second)
	if !started || !strings.Contains(log, "slot device not usable") || !strings.Contains(log, "key=slots.B") {
		t.Fatalf("otad run did not start with a warning:\n%s", log)
	}
}

func appendConfig(t *testing.T, cfg, more string) string {
	t.Helper()
	b, err := os.ReadFile(cfg)
	devicetest.Must(t, err)
	devicetest.Must(t, os.WriteFile(cfg, append(b, more...), 0o600))
	return cfg
}
