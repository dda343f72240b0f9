package device

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/otad/otad/internal/testkit/devicetest"
)

// otad config check --unit-dropin prints what the board's config needs under
// the shipped unit's sandbox: each device otad writes allowed, each path
// writable (with "-": a missing one must not fail the unit), and nothing the
// unit already gives.
func TestUnitDropin(t *testing.T) {
	dir := t.TempDir()
	fw := filepath.Join(dir, "fw_env.config")
	devicetest.Must(t, os.WriteFile(fw, []byte("# two copies\n/dev/mmcblk0boot1 0x0 0x4000\n/dev/mmcblk0boot1 0x4000 0x4000\n"), 0o600))
	for _, c := range []struct {
		name, config string
		want, not    []string
	}{
		{"uboot on eMMC", `compatible = "acme,gw"
[slots]
A = "/dev/mmcblk0p2"
B = "/dev/disk/by-partlabel/rootB"
[bootloader]
type = "uboot"
env_config = "` + fw + `"
`, []string{"[Service]\n", "DeviceAllow=/dev/mmcblk0p2 rw\n", "DeviceAllow=/dev/disk/by-partlabel/rootB rw\n",
			"DeviceAllow=/dev/mmcblk0boot1 rw\n", "force_ro - - - - 0"},
			[]string{"/var/lib/otad", "/run/otad", "/boot/efi", "ReadWritePaths"}},
		{"grub on EFI, state elsewhere", `compatible = "acme,pc"
state_dir = "/data/otad"
[slots]
A = "/dev/sda2"
B = "/dev/sda3"
[bootloader]
type = "grub"
env_file = "/boot/efi/EFI/debian/grubenv"
`, []string{"DeviceAllow=/dev/sda2 rw\n", "DeviceAllow=/dev/sda3 rw\n", "ReadWritePaths=-/boot/efi/EFI/debian\n", "ReadWritePaths=-/data/otad\n"},
			[]string{"/var/lock", "force_ro", "/run/otad"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := filepath.Join(dir, "otad.toml")
			devicetest.Must(t, os.WriteFile(cfg, []byte("device_id = \"gw-1\"\n"+c.config), 0o600))
			code, stdout, stderr := otad(t, "config", "check", "-file-only", "--unit-dropin", "-c", cfg)
			if code != 0 || stderr != "" {
				t.Fatalf("exit %d: %s%s", code, stdout, stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(stdout, w) {
					t.Errorf("drop-in lacks %q:\n%s", w, stdout)
				}
			}
			for _, n := range c.not {
				if strings.Contains(stdout, n) {
					t.Errorf("drop-in names %q:\n%s", n, stdout)
				}
			}
			if strings.Count(stdout, "DeviceAllow=/dev/mmcblk0boot1") > 1 {
				t.Errorf("the env device twice:\n%s", stdout)
			}
			for _, l := range strings.Split(stdout, "\n") {
				if strings.HasPrefix(l, "ReadWritePaths=") && !strings.HasPrefix(l, "ReadWritePaths=-") {
					t.Errorf("a path without '-': %q", l)
				}
			}
		})
	}
	// A config with errors gets no drop-in: it would be wrong.
	bad := filepath.Join(dir, "bad.toml")
	devicetest.Must(t, os.WriteFile(bad, []byte("[slots]\nA = \"/dev/x\"\n"), 0o600))
	if code, stdout, _ := otad(t, "config", "check", "-file-only", "--unit-dropin", "-c", bad); code != 2 || stdout != "" {
		t.Errorf("bad config: exit %d, stdout %q", code, stdout)
	}
}
