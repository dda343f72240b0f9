package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The systemd guest (TestSystemd, docs/e2e.md): a Debian bookworm root
// filesystem made by debootstrap --variant=minbase with systemd as PID 1,
// built once and kept under the cache directory, then copied for each slot
// image and packed with mkfs.ext4 -d.

// SystemdSuite is the Debian suite of the guest's root filesystem.
const SystemdSuite = "bookworm"

// SystemdPackages are what debootstrap adds to minbase: systemd as init,
// udev (device units, so mounts wait for their disks), dbus and kmod.
func SystemdPackages() []string { return []string{"systemd-sysv", "udev", "dbus", "kmod"} }

// rootTrim is what the cached root leaves out: documentation, locales,
// apt's caches and lists, udev's hardware database: a smaller slot image is
// a shorter install under TCG, and the guest needs none of them.
var rootTrim = []string{
	"usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale", "usr/share/lintian", "usr/share/i18n",
	"var/cache/apt", "var/lib/apt/lists", "usr/lib/udev/hwdb.bin", "usr/lib/udev/hwdb.d", "usr/lib/x86_64-linux-gnu/gconv",
}

// SystemdCacheDir is where the built root filesystems are kept:
// $OTAD_E2E_SYSTEMD, else ${XDG_CACHE_HOME:-~/.cache}/otad-e2e/systemd.
func SystemdCacheDir() string {
	if d := os.Getenv("OTAD_E2E_SYSTEMD"); d != "" {
		return d
	}
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, _ := os.UserHomeDir()
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "otad-e2e", "systemd")
}

// DebianMirror is the Debian mirror the machine's apt sources use (deb822
// or one-line form), as scripts/install-deps finds it.
func DebianMirror() (string, error) {
	if b, err := os.ReadFile("/etc/apt/sources.list.d/debian.sources"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "URIs:" {
				return f[1], nil
			}
		}
	}
	if b, err := os.ReadFile("/etc/apt/sources.list"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 3 && f[0] == "deb" && f[2] == SystemdSuite {
				return f[1], nil
			}
		}
	}
	return "", fmt.Errorf("no Debian %s source in /etc/apt: %w", SystemdSuite, ErrMissing)
}

// rootKey names a cached root by what made it.
func rootKey(mirror string) string {
	h := sha256.Sum256([]byte(strings.Join(append([]string{SystemdSuite, mirror, "minbase"}, append(SystemdPackages(), rootTrim...)...), "\n")))
	return SystemdSuite + "-" + hex.EncodeToString(h[:6])
}

// SystemdRoot returns the cached root filesystem for mirror, building it
// with debootstrap first if needed (about 80 s; needs root). logf reports
// what it does.
func SystemdRoot(ctx context.Context, cache, mirror string, logf func(string, ...any)) (string, error) {
	dir := filepath.Join(cache, rootKey(mirror))
	root := filepath.Join(dir, "root")
	if _, err := os.Stat(filepath.Join(dir, "done")); err == nil {
		return root, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp := filepath.Join(dir, "root.new")
	os.RemoveAll(tmp)
	logf("debootstrap --variant=minbase %s into %s (once; then cached)", SystemdSuite, dir)
	if _, err := run(ctx, "debootstrap", "--variant=minbase", "--include="+strings.Join(SystemdPackages(), ","), SystemdSuite, tmp, mirror); err != nil {
		return "", err
	}
	for _, p := range rootTrim {
		if err := os.RemoveAll(filepath.Join(tmp, p)); err != nil {
			return "", err
		}
	}
	os.RemoveAll(root)
	if err := os.Rename(tmp, root); err != nil {
		return "", err
	}
	return root, os.WriteFile(filepath.Join(dir, "done"), []byte(rootKey(mirror)+"\n"), 0o644)
}

// MissingSystemd lists what TestSystemd needs beyond the GRUB suite's tools:
// root (debootstrap, chroot, device nodes in the tree), debootstrap, a
// Debian mirror in the apt sources, and the host's systemctl (--root enable).
func MissingSystemd() []string {
	var out []string
	if os.Geteuid() != 0 {
		out = append(out, "root (debootstrap and chroot)")
	}
	for _, t := range []Tool{{"debootstrap", "debootstrap"}, {"chroot", "coreutils"}, {"systemctl", "systemd"}} {
		if _, err := lookPath(t.Name); err != nil {
			out = append(out, fmt.Sprintf("%s (apt-get install %s)", t.Name, t.Package))
		}
	}
	if _, err := DebianMirror(); err != nil {
		out = append(out, "a Debian mirror in /etc/apt/sources.list.d/debian.sources")
	}
	return out
}
