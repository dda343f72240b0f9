package device

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/pelletier/go-toml/v2"

	"github.com/otad/otad/device/config"
	"github.com/otad/otad/device/node"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/tlsfiles"
	"github.com/otad/otad/verify"
)

const configUsage = `usage: otad config check [-c FILE] [-file-only]

Checks the config: every wrong or missing value, and (unless -file-only)
what it names on this machine: the slot devices, the bootloader's files, the
trusted keys, the health check, the TLS files. Prints each problem as
FILE: KEY: what is wrong, and exits 2; or prints the effective settings
(defaults filled in) and exits 0. Run 'otad config check -h' for the flags.
`

func cmdConfig(e *env, args []string) int {
	args = args[1:]
	if len(args) > 0 && args[0] == "check" {
		return configCheck(e, append([]string{"config check"}, args[1:]...))
	}
	if len(args) > 0 && isHelp(args[0]) {
		fmt.Fprint(e.stdout, configUsage)
		return ota.ExitOK
	}
	fmt.Fprint(e.stderr, configUsage)
	return ota.ExitUsage
}

func configCheck(e *env, args []string) int {
	var fileOnly bool
	if _, code, done := e.flags(args, 0, func(fs *flag.FlagSet) {
		fs.BoolVar(&fileOnly, "file-only", false, "check the file alone, not what it names on this machine (a config for an image being built)")
	}); done {
		return code
	}
	data, err := os.ReadFile(e.cfgPath)
	if err != nil {
		return e.fail(ota.ExitUsage, "config: %v", err)
	}
	c, err := config.Decode(data, e.cfgPath, e.machine)
	problems := unjoin(err)
	if c != nil && !fileOnly {
		problems = append(problems, hostProblems(c)...)
	}
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(e.stderr, p)
		}
		fmt.Fprintf(e.stderr, "otad: %s: %d to fix (the keys: /usr/share/doc/otad/contract/config.md)\n", e.cfgPath, len(problems))
		return ota.ExitUsage
	}
	return printEffective(e.stdout, c)
}

// unjoin lists the errors errors.Join put together.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	if err != nil {
		return []error{err}
	}
	return nil
}

// hostProblems checks what c names on this machine, as the daemon will use
// it; each problem names the file and the key.
func hostProblems(c *config.Config) []error {
	var errs []error
	bad := func(key, format string, a ...any) {
		errs = append(errs, &config.Error{Path: c.Path, Key: key, Msg: fmt.Sprintf(format, a...)})
	}
	for _, p := range node.SlotProblems(c) {
		bad(p.Key, "%v", p.Err)
	}
	need := func(key, path, what string) {
		if _, err := os.Stat(path); err != nil {
			bad(key, "%s: %v", what, err)
		}
	}
	switch c.Bootloader.Type {
	case "uboot":
		need("bootloader.env_config", c.Bootloader.EnvConfig, "the U-Boot environment's location (fw_env.config)")
		need("slots.cmdline", c.Slots.Cmdline, "where the booted slot is read from")
	case "grub":
		need("bootloader.env_file", c.Bootloader.EnvFile, "the grubenv")
		need("slots.cmdline", c.Slots.Cmdline, "where the booted slot is read from")
	case "sim":
		need("bootloader.env_file", filepath.Dir(c.Bootloader.EnvFile), "the directory of the sim bootloader's file")
	}
	kr, badKeys, err := verify.LoadKeyDir(c.Trust.KeysDir)
	switch {
	case err != nil:
		bad("trust.keys_dir", "%v", err)
	case kr.Len() < c.Trust.Threshold:
		bad("trust.keys_dir", "%s holds %d usable public keys, trust.threshold is %d: put the release public key (PEM, from otactl keygen) there",
			c.Trust.KeysDir, kr.Len(), c.Trust.Threshold)
	}
	for _, e := range badKeys {
		bad("trust.keys_dir", "%v", e)
	}
	if h := c.Commit.HealthCommand; len(h) > 0 && filepath.IsAbs(h[0]) { // else named by the file's check
		if st, err := os.Stat(h[0]); err != nil {
			bad("commit.health_command", "%v", err)
		} else if st.Mode()&0o111 == 0 || st.IsDir() {
			bad("commit.health_command", "%s is not an executable file", h[0])
		}
	}
	tlsSets := []tlsfiles.Files{{Section: "download", CAFile: c.Download.CAFile, CertFile: c.Download.CertFile, KeyFile: c.Download.KeyFile}}
	if c.MQTT.Broker != "" {
		tlsSets = append(tlsSets, tlsfiles.Files{Section: "mqtt", CAFile: c.MQTT.CAFile, CertFile: c.MQTT.CertFile, KeyFile: c.MQTT.KeyFile})
	}
	for _, f := range tlsSets {
		if _, err := f.Config(""); err != nil {
			var te *tlsfiles.Error
			if errors.As(err, &te) {
				bad(te.Key, "%s", te.Msg)
			} else {
				bad(f.Section, "%v", err)
			}
		}
	}
	return errs
}

// printEffective prints the settings otad will run with, defaults filled
// in, as TOML; a password is not printed.
func printEffective(w io.Writer, c *config.Config) int {
	shown := *c
	if shown.MQTT.Password != "" {
		shown.MQTT.Password = "(set)"
	}
	b, err := toml.Marshal(shown)
	if err != nil {
		fmt.Fprintf(w, "otad: %s: %v\n", c.Path, err)
		return ota.ExitFailure
	}
	fmt.Fprintf(w, "# %s is valid. The effective settings, defaults filled in:\n%s", c.Path, b)
	return ota.ExitOK
}
