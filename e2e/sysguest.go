package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// SystemdGuest is one slot image of the systemd guest: the cached Debian
// root with the kernel and an initramfs under /boot (where grub.cfg looks),
// the network, the test driver, and otad's package, either left in /root
// for the driver to install (a factory image on its first day) or installed
// by the image's maker (an update image).
type SystemdGuest struct {
	// Layout is "grub" (an EFI PC: the ESP mounted at /boot/efi, the
	// grubenv on it) or "uboot" (a board: no ESP, the U-Boot environment on
	// a device of its own).
	Layout       string
	Version      string // /etc/otad-image-version
	Config       GuestConfig
	PublicKeyPEM []byte
	Deb          string // otad's .deb
	// Preinstalled: dpkg -i in a chroot, the config, the key and the
	// drop-in from otad config check --unit-dropin, the unit enabled.
	Preinstalled bool
	Kernel       Kernel
	Initramfs    string // SystemdInitramfs's, gzipped
}

// guestMasked are units the test does not want: the getty would share the
// console with the driver; the timers only cost time.
var guestMasked = []string{"serial-getty@ttyS0.service", "getty@tty1.service", "apt-daily.timer", "apt-daily-upgrade.timer",
	"e2scrub_all.timer", "e2scrub_reap.service", "fstrim.timer", "dpkg-db-backup.timer"}

// Build packs the guest into an ext4 image of sizeMiB at out; work holds the
// tree meanwhile.
func (g SystemdGuest) Build(ctx context.Context, work, root, out string, sizeMiB int) error {
	tree, err := os.MkdirTemp(work, "tree-"+g.Version+"-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tree)
	// cp -a keeps owners, modes and device nodes; the tree is root's.
	if _, err := run(ctx, "cp", "-a", root+"/.", tree); err != nil {
		return err
	}
	files := map[string]struct {
		data string
		mode os.FileMode
	}{
		"etc/hostname":                          {"e2e-systemd\n", 0o644},
		"etc/fstab":                             {fstab(g.Layout), 0o644},
		"etc/systemd/network/10-e2e.network":    {networkUnit, 0o644},
		"etc/systemd/system/e2e-driver.service": {driverUnit, 0o644},
		"usr/local/sbin/e2e-driver":             {driverScript, 0o755},
		"etc/otad-image-version":                {g.Version + "\n", 0o644},
		"etc/e2e/layout":                        {g.Layout + "\n", 0o644},
		"etc/e2e/otad.toml":                     {g.Config.TOML(), 0o644},
		"etc/e2e/release.pub":                   {string(g.PublicKeyPEM), 0o644},
	}
	if g.Config.Bootloader == "uboot" {
		files["etc/e2e/fw_env.config"] = struct {
			data string
			mode os.FileMode
		}{GuestFwEnvConfig, 0o644}
	}
	for name, f := range files {
		p := filepath.Join(tree, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(f.data), f.mode); err != nil {
			return err
		}
	}
	for src, dst := range map[string]string{g.Kernel.Image: "boot/vmlinuz", g.Initramfs: "boot/initrd.img", g.Deb: "root/otad.deb"} {
		if err := copyFile(src, filepath.Join(tree, dst)); err != nil {
			return err
		}
	}
	if _, err := run(ctx, "systemctl", "--root="+tree, "enable", "systemd-networkd.service", "e2e-driver.service"); err != nil {
		return err
	}
	if _, err := run(ctx, "systemctl", append([]string{"--root=" + tree, "mask"}, guestMasked...)...); err != nil {
		return err
	}
	if g.Preinstalled {
		if err := g.install(ctx, tree); err != nil {
			return err
		}
	}
	os.Remove(out)
	_, err = run(ctx, "mkfs.ext4", "-q", "-F", "-L", "root-"+g.Version, "-d", tree, out, strconv.Itoa(sizeMiB)+"M")
	return err
}

// install is what the image's maker does with the package: dpkg -i, the
// board's config and key and drop-in, the unit enabled.
func (g SystemdGuest) install(ctx context.Context, tree string) error {
	if _, err := run(ctx, "chroot", tree, "dpkg", "-i", "/root/otad.deb"); err != nil {
		return err
	}
	for src, dst := range map[string]string{"etc/e2e/otad.toml": "etc/otad/otad.toml", "etc/e2e/release.pub": "etc/otad/keys.d/release.pub"} {
		if err := copyFile(filepath.Join(tree, src), filepath.Join(tree, dst)); err != nil {
			return err
		}
	}
	// -file-only: the devices are the guest's, not this machine's.
	dropin, err := run(ctx, "chroot", tree, "otad", "config", "check", "-file-only", "--unit-dropin")
	if err != nil {
		return err
	}
	d := filepath.Join(tree, "etc/systemd/system/otad.service.d")
	if err := os.MkdirAll(d, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(d, "board.conf"), dropin, 0o644); err != nil {
		return err
	}
	_, err = run(ctx, "systemctl", "--root="+tree, "enable", "otad.service")
	return err
}

// SystemdModules are the kernel modules the guest's initramfs loads before
// it hands over to systemd (the root has no /lib/modules): virtio disks and
// network, ext4, vfat for the ESP, and what systemd's own mounts need
// (autofs4, configfs, and efivarfs, which loads on an EFI boot only), so
// that no unit fails for a module.
func SystemdModules() []string {
	return []string{
		"virtio_ring", "virtio", "virtio_pci_modern_dev", "virtio_pci_legacy_dev", "virtio_pci", "virtio_blk",
		"failover", "net_failover", "virtio_net",
		"crc32c_generic", "crc16", "mbcache", "jbd2", "ext4",
		"fat", "vfat", "nls_cp437", "nls_ascii",
		"autofs4", "configfs", systemdEFIModule,
	}
}

// systemdEFIModule refuses to load without EFI (a board's direct boot).
const systemdEFIModule = "efivarfs"

// systemdInit is the initramfs's /init: load the modules, mount the root the
// kernel command line names (root=, read-only), and switch to systemd.
const systemdInit = `#!/bin/sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
fatal() { echo "` + MarkerFatal + `: initramfs: $*"; sleep 1; poweroff -f; }
for m in %s; do insmod /lib/modules/$m.ko || [ $m = ` + systemdEFIModule + ` ] || fatal "insmod $m"; done
root=
for w in $(cat /proc/cmdline); do case $w in root=*) root=${w#root=};; esac; done
[ -n "$root" ] || fatal "no root= on the kernel command line"
i=0
while [ ! -b "$root" ]; do i=$((i+1)); [ $i -gt 100 ] && fatal "no $root"; sleep 0.1; done
mkdir -p /newroot
mount -t ext4 -o ro "$root" /newroot || fatal "mount $root"
umount /proc /sys
mount --move /dev /newroot/dev
exec switch_root /newroot /sbin/init
`

func systemdInitScript() string { return fmt.Sprintf(systemdInit, strings.Join(SystemdModules(), " ")) }

// SystemdInitramfs writes the initramfs that boots the systemd root.
func SystemdInitramfs(busybox []byte, modules map[string][]byte, out string) error {
	a := NewArchive()
	for _, d := range []string{"proc", "sys", "dev", "newroot"} {
		a.Dir(d)
	}
	a.CharDev("dev/console", 5, 1)
	a.File("init", []byte(systemdInitScript()), 0o755)
	a.File("bin/busybox", busybox, 0o755)
	a.Symlink("bin/sh", "busybox")
	for _, m := range SystemdModules() {
		ko, ok := modules[m]
		if !ok {
			return fmt.Errorf("initramfs: kernel module %s missing", m)
		}
		a.File("lib/modules/"+m+".ko", ko, 0o644)
	}
	return WriteInitramfs(a, out)
}
