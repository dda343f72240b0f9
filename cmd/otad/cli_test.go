package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/otad/otad/internal/testkit/devicetest"
)

// Help is asked for in every usual way: usage on stdout, nothing on
// stderr, exit 0. A wrong command line: usage on stderr, exit 2.
func TestHelp(t *testing.T) {
	for _, c := range []struct {
		args   []string
		code   int
		stdout string // contained; "" means empty
		stderr string
	}{
		{[]string{"help"}, 0, "usage: otad COMMAND", ""},
		{[]string{"-h"}, 0, "  install FILE ", ""},
		{[]string{"--help"}, 0, "  config check ", ""},
		{[]string{"-help"}, 0, "Exit codes: 0 ok", ""},
		{[]string{"help", "install"}, 0, "usage: otad install [-c FILE] [-v] [flags] FILE", ""},
		{[]string{"install", "-h"}, 0, "usage: otad install", ""},
		{[]string{"status", "--help"}, 0, "-json", ""},
		{[]string{"run", "-h"}, 0, "usage: otad run", ""},
		{[]string{"mark-good", "-h"}, 0, "usage: otad mark-good", ""},
		{[]string{"version", "--help"}, 0, "usage: otad version", ""},
		{[]string{"config", "-h"}, 0, "usage: otad config check", ""},
		{[]string{"help", "config"}, 0, "usage: otad config check", ""},
		{[]string{"config", "check", "-h"}, 0, "-file-only", ""},
		{nil, 2, "", "usage: otad COMMAND"},
		{[]string{"frobnicate"}, 2, "", `unknown command "frobnicate"`},
		{[]string{"help", "frobnicate"}, 2, "", `unknown command "frobnicate"`},
		{[]string{"install", "--nope"}, 2, "", "flag provided but not defined: -nope"},
		{[]string{"install"}, 2, "", "want 1 arguments"},
		{[]string{"status", "extra"}, 2, "", "usage: otad status"},
		{[]string{"config"}, 2, "", "usage: otad config check"},
		{[]string{"config", "frob"}, 2, "", "usage: otad config check"},
	} {
		code, stdout, stderr := otad(t, c.args...)
		if code != c.code || !strings.Contains(stdout, c.stdout) || !strings.Contains(stderr, c.stderr) ||
			(c.stdout == "") != (stdout == "") || (c.stderr == "") != (stderr == "") {
			t.Errorf("otad %q: exit %d\nstdout: %s\nstderr: %s", c.args, code, stdout, stderr)
		}
	}
}

func TestConfigCheck(t *testing.T) {
	tb := devicetest.New(t, devicetest.Options{Policy: "manual"})
	code, stdout, stderr := otad(t, "config", "check", "-c", tb.Cfg.Path)
	// The effective settings: what the file says and the defaults it left out.
	for _, want := range []string{"is valid", "compatible = 'acme,gw-v2'", "[bootloader]", "type = 'sim'", "attempts = 3", "clock_skew = '5m0s'"} {
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
	if code, _, stderr := otad(t, "config", "check", "-c", filepath.Join(dir, "missing.toml")); code != 2 || !strings.Contains(stderr, "missing.toml") {
		t.Errorf("missing file: exit %d: %s", code, stderr)
	}
}
