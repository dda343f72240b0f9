package device

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/otad/otad/bootctl/uboot"
	"github.com/otad/otad/device/config"
)

// DropinPath is where the board's drop-in for otad.service goes: the
// packaged unit stays as shipped (an upgrade replaces it), the drop-in
// holds what is this board's (docs/operating.md#7-systemd).
const DropinPath = "/etc/systemd/system/otad.service.d/board.conf"

// unitStateDir is writable without a drop-in (StateDirectory=); so is /run,
// which ProtectSystem=strict leaves writable (TestSystemd saw the
// fw_printenv lock in /run/lock written).
const unitStateDir = "/var/lib/otad"

// emmcBoot is an eMMC boot partition, read-only under Linux until its
// force_ro is 0, which the unit cannot write (ProtectKernelTunables=).
var emmcBoot = regexp.MustCompile(`^/dev/(mmcblk[0-9]+boot[0-9]+)$`)

// unitDropin is the drop-in the config needs under the shipped unit's
// sandbox (DevicePolicy=closed, ProtectSystem=strict): each device otad
// opens for writing (the slots, a U-Boot environment on a device) allowed,
// each file it writes outside its state and runtime directories writable
// (the grubenv's directory on the ESP, a file-backed environment). fileOnly: the fw_env.config may not be on this machine.
func unitDropin(c *config.Config, fileOnly bool) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s: this board's devices and paths for otad.service,\n", DropinPath)
	fmt.Fprintf(&b, "# made by `otad config check --unit-dropin -c %s`. Then: systemctl daemon-reload\n[Service]\n", c.Path)
	var devices, paths []string
	var notes []string
	add := func(p, why string) {
		switch {
		case strings.HasPrefix(p, "/dev/"):
			if slices.Contains(devices, p) {
				return
			}
			devices = append(devices, p)
			fmt.Fprintf(&b, "# %s\nDeviceAllow=%s rw\n", why, p)
			if m := emmcBoot.FindStringSubmatch(p); m != nil {
				notes = append(notes, fmt.Sprintf("# %s is an eMMC boot partition: set /sys/block/%s/force_ro to 0 at boot outside otad\n"+
					"# (the unit cannot write /sys), e.g. /etc/tmpfiles.d/otad.conf: w /sys/block/%s/force_ro - - - - 0\n", p, m[1], m[1]))
			}
		case !within(p, unitStateDir) && !within(p, "/run") && !slices.Contains(paths, p):
			paths = append(paths, p)
			fmt.Fprintf(&b, "# %s\nReadWritePaths=-%s\n", why, p)
		}
	}
	add(c.Slots.A, "slots.A")
	add(c.Slots.B, "slots.B")
	switch c.Bootloader.Type {
	case "uboot":
		copies, err := uboot.LoadConfig(c.Bootloader.EnvConfig)
		switch {
		case err == nil:
			for i, cp := range copies {
				add(cp.Path, fmt.Sprintf("the U-Boot environment, copy %d (bootloader.env_config %s)", i, c.Bootloader.EnvConfig))
			}
		case fileOnly:
			fmt.Fprintf(&b, "# bootloader.env_config %s is not on this machine: add a DeviceAllow= line for each device it names\n", c.Bootloader.EnvConfig)
		default:
			return "", fmt.Errorf("%s: bootloader.env_config: %w", c.Path, err)
		}
		// The lock fw_printenv shares with otad is in /var/lock, which is
		// /run/lock: ProtectSystem=strict leaves /run writable (TestSystemd).
	case "grub", "sim":
		// The grubenv is rewritten in place (GRUB finds it by its blocks);
		// the sim bootloader replaces its file, hence the directory.
		add(filepath.Dir(c.Bootloader.EnvFile), "bootloader.env_file "+c.Bootloader.EnvFile)
	}
	add(c.StateDir, "state_dir")
	add(filepath.Dir(c.ControlSocket), "control_socket "+c.ControlSocket)
	for _, n := range notes {
		b.WriteString(n)
	}
	return b.String(), nil
}

// within reports whether path is dir or below it.
func within(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, dir+"/")
}
