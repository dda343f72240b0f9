package device

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/pelletier/go-toml/v2"

	"github.com/otad/otad/device/config"
	"github.com/otad/otad/device/node"
	"github.com/otad/otad/ota"
)

const configUsage = `usage: otad config check [-c FILE] [-file-only] [-unit-dropin]

Checks the config: every wrong or missing value, and (unless -file-only)
what otad run checks before it starts, with the same code: the state
directory, the booted slot, the bootloader's environment, the trusted keys,
the TLS files; and what run would start with but warn of: the slot devices,
too few keys, the health check. -file-only still checks the root of
trust (trust.root), which ships in the image with the file (where its path
is absent, it says so and does not fail). Prints each problem as FILE: KEY:
what is wrong, and exits with the code otad run would refuse with (2 bad config, 5
unreadable boot environment; 2 when run would only warn); or prints the
effective settings (defaults filled in) and exits 0. -unit-dropin prints
the systemd drop-in the config needs instead (DeviceAllow=, ReadWritePaths=:
/etc/systemd/system/otad.service.d/board.conf). Run 'otad config check -h'
for the flags.
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
	if len(args) > 0 {
		fmt.Fprintf(e.stderr, "otad: unknown config command %q (the one there is: check)\n", args[0])
	} else {
		fmt.Fprintln(e.stderr, "otad: config needs a command: check")
	}
	fmt.Fprint(e.stderr, configUsage)
	return ota.ExitUsage
}

func configCheck(e *env, args []string) int {
	var fileOnly, dropin bool
	if _, code, done := e.flags(args, 0, func(fs *flag.FlagSet) {
		fs.BoolVar(&fileOnly, "file-only", false, "check the file alone, not what it names on this machine (a config for an image being built)")
		fs.BoolVar(&dropin, "unit-dropin", false, "print the systemd drop-in (DeviceAllow=, ReadWritePaths=) the config needs, not the settings")
	}); done {
		return code
	}
	data, err := os.ReadFile(e.cfgPath)
	if err != nil {
		return e.fail(ota.ExitUsage, "config: %v", err)
	}
	c, err := config.Decode(data, e.cfgPath, e.machine)
	problems := unjoin(err)
	code := ota.ExitOK
	if len(problems) > 0 {
		code = ota.ExitUsage // otad run refuses a bad file first
	}
	if c != nil && fileOnly && c.Trust.Root != "" {
		// The root ships in the image with the file: a root that does not
		// parse or is not signed by a threshold of its own root keys would
		// stop otad run (docs/operating.md, rotating keys).
		// Run from a checkout (docs/integrating.md) the path is the
		// device's and absent here: said, not failed, so the drop-in and
		// the exit code still serve a build machine.
		_, err := node.ReadAnchor(c.Trust.Root)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			fmt.Fprintf(e.stderr, "%s: trust.root: %s is not on this machine: not checked (run the check in the image's tree to check it)\n", c.Path, c.Trust.Root)
		case err != nil:
			problems = append(problems, &config.Error{Path: c.Path, Key: "trust.root", Msg: err.Error()})
			code = ota.ExitUsage
		}
	}
	if c != nil && !fileOnly {
		refusals, warnings := node.Check(c)
		for _, r := range refusals {
			problems = append(problems, r)
			if code == ota.ExitOK {
				code = r.Code
			}
		}
		for _, w := range warnings {
			problems = append(problems, &config.Error{Path: c.Path, Key: w.Key,
				Msg: fmt.Sprintf("%s: %v (otad run starts, with a warning: %s)", w.Path, w.Err, w.Msg)})
		}
		if code == ota.ExitOK && len(warnings) > 0 {
			code = ota.ExitUsage
		}
	}
	if dropin && c != nil && err == nil {
		text, derr := unitDropin(c, fileOnly)
		if derr != nil {
			return e.fail(ota.ExitUsage, "%v", derr)
		}
		io.WriteString(e.stdout, text)
	}
	if len(problems) > 0 {
		for _, p := range problems {
			e.printErr(p.Error())
		}
		e.printErr(fmt.Sprintf("otad: %s: %d to fix (the keys: /usr/share/doc/otad/contract/config.md)", e.cfgPath, len(problems)))
		return code
	}
	if dropin {
		return ota.ExitOK
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
