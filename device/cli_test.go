package device

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/otad/otad/internal/testkit/clitest"
	"github.com/otad/otad/internal/testkit/devicetest"
)

// Help is asked for in every usual way: usage on stdout, nothing on
// stderr, exit 0. A wrong command line: usage on stderr, exit 2.
func TestHelp(t *testing.T) {
	clitest.Run(t, func(args ...string) (int, string, string) { return otad(t, args...) }, []clitest.Case{
		{Args: []string{"help"}, Stdout: "usage: otad COMMAND"},
		{Args: []string{"-h"}, Stdout: "  install [--payload P] FILE "},
		{Args: []string{"--help"}, Stdout: "  config check "},
		{Args: []string{"-help"}, Stdout: "Exit codes: 0 ok"},
		{Args: []string{"help", "install"}, Stdout: "usage: otad install [-c FILE] [-v] [flags] [--payload P] FILE"},
		{Args: []string{"install", "-h"}, Stdout: "-payload string"},
		{Args: []string{"info", "-h"}, Stdout: "usage: otad info"},
		{Args: []string{"info"}, Code: 2, Stderr: "want 1 arguments"},
		{Args: []string{"install", "-h"}, Stdout: "usage: otad install"},
		{Args: []string{"status", "--help"}, Stdout: "-json"},
		{Args: []string{"run", "-h"}, Stdout: "usage: otad run"},
		{Args: []string{"mark-good", "-h"}, Stdout: "usage: otad mark-good"},
		{Args: []string{"version", "--help"}, Stdout: "usage: otad version"},
		{Args: []string{"config", "-h"}, Stdout: "usage: otad config check"},
		{Args: []string{"help", "config"}, Stdout: "usage: otad config check"},
		{Args: []string{"config", "check", "-h"}, Stdout: "-file-only"},
		{Code: 2, Stderr: "usage: otad COMMAND"},
		{Args: []string{"frobnicate"}, Code: 2, Stderr: `unknown command "frobnicate"`},
		{Args: []string{"help", "frobnicate"}, Code: 2, Stderr: `unknown command "frobnicate"`},
		{Args: []string{"install", "--nope"}, Code: 2, Stderr: "flag provided but not defined: -nope"},
		{Args: []string{"install"}, Code: 2, Stderr: "want 1 arguments"},
		{Args: []string{"status", "extra"}, Code: 2, Stderr: "usage: otad status"},
		{Args: []string{"config"}, Code: 2, Stderr: "usage: otad config check"},
		{Args: []string{"config", "frob"}, Code: 2, Stderr: "usage: otad config check"},
		{Args: []string{"config", "chek"}, Code: 2, Stderr: `otad: unknown config command "chek"`},
		{Args: []string{"-c", "/nonexistent/otad.toml", "-v", "status"}, Code: 2, Stderr: "open /nonexistent/otad.toml"},
		{Args: []string{"-c=/nonexistent/otad.toml", "config", "check", "-file-only"}, Code: 2, Stderr: "open /nonexistent/otad.toml"},
		{Args: []string{"-v", "version"}, Stdout: "otad "},
		{Args: []string{"--version"}, Stdout: "otad devel\n"},
		{Args: []string{"-version"}, Stdout: "otad devel\n"},
		{Args: []string{"-c", "x"}, Code: 2, Stderr: "usage: otad COMMAND"},
	})
}

func TestConfigCheck(t *testing.T) {
	tb := devicetest.New(t, devicetest.Options{Policy: "manual"})
	code, stdout, stderr := otad(t, "config", "check", "-c", tb.Cfg.Path)
	// The effective settings: what the file says and the defaults it left out.
	for _, want := range []string{"is valid", "compatible = 'acme,gw-v2'", "[bootloader]", "type = 'sim'", "attempts = 3", "clock_skew = '5m'"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("config check of a good config lacks %q:\n%s", want, stdout)
		}
	}
	if code != 0 || stderr != "" {
		t.Fatalf("good config: exit %d: %s", code, stderr)
	}

	// Every problem at once, with the file and the key: in the file, and
	// on the machine (a slot device that is not there, an empty trust
	// directory).
	dir := t.TempDir()
	bad := filepath.Join(dir, "otad.toml")
	keys := filepath.Join(dir, "keys.d")
	devicetest.Must(t, os.Mkdir(keys, 0o755))
	devicetest.Must(t, os.WriteFile(bad, []byte(`device_id = "gw-1"
[slots]
A = "`+filepath.Join(dir, "nope")+`"
[trust]
keys_dir = "`+keys+`"
[bootloader]
type = "sim"
env_file = "`+filepath.Join(dir, "bootenv")+`"
[reboot]
policy = "sometimes"
`), 0o600))
	code, stdout, stderr = otad(t, "config", "check", "-c", bad)
	for _, key := range []string{"compatible", "slots.B", "reboot.policy", "slots.A", "trust.keys_dir"} {
		if !strings.Contains(stderr, bad+": "+key+": ") {
			t.Errorf("stderr does not name %s:\n%s", key, stderr)
		}
	}
	if code != 2 || stdout != "" || !strings.Contains(stderr, "5 to fix") {
		t.Errorf("bad config: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	// -file-only leaves the machine out.
	code, _, stderr = otad(t, "config", "check", "-file-only", "-c", bad)
	if code != 2 || strings.Contains(stderr, "slots.A") || !strings.Contains(stderr, "3 to fix") {
		t.Errorf("-file-only: exit %d: %s", code, stderr)
	}
	// Names a topic cannot carry on every broker, each with its key.
	names := filepath.Join(dir, "names.toml")
	devicetest.Must(t, os.WriteFile(names, []byte(`device_id = "gw.1"
compatible = "acme,gw-v2"
[slots]
A = "a"
B = "b"
[mqtt]
broker = "mqtt://127.0.0.1:1883"
topic_prefix = "acme/ota"
groups = ["ok", "eu prod"]
`), 0o600))
	code, _, stderr = otad(t, "config", "check", "-file-only", "-c", names)
	for _, key := range []string{"device_id", "mqtt.topic_prefix", "mqtt.groups[1]"} {
		if !strings.Contains(stderr, names+": "+key+": not a valid name") {
			t.Errorf("stderr does not name %s:\n%s", key, stderr)
		}
	}
	if code != 2 || !strings.Contains(stderr, "3 to fix") {
		t.Errorf("bad names: exit %d: %s", code, stderr)
	}
	if code, _, stderr := otad(t, "config", "check", "-c", filepath.Join(dir, "missing.toml")); code != 2 || !strings.Contains(stderr, "missing.toml") {
		t.Errorf("missing file: exit %d: %s", code, stderr)
	}
}

// otad status on a device where otad never ran: no journal, and still the
// booted slot, from the kernel command line.
func TestStatusBeforeFirstRun(t *testing.T) {
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "console=ttyS0 root=/dev/vda3 otad.slot=B\n", "A = \"/dev/vda2\"\nB = \"/dev/vda3\"\n",
		"[bootloader]\ntype = \"grub\"\nenv_file = \""+dir+"/grubenv\"\n")
	code, stdout, stderr := otad(t, "status", "--json", "-c", cfg)
	if code != 0 || !strings.Contains(stdout, `"booted_slot": "B"`) || !strings.Contains(stdout, `"state": "idle"`) {
		t.Fatalf("exit %d: %s %s", code, stdout, stderr)
	}
}
