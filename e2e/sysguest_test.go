package e2e

import (
	"os/exec"
	"strings"
	"testing"
)

// The systemd guest's scripts parse, and its pieces say what TestSystemd
// relies on.
func TestSystemdGuestPieces(t *testing.T) {
	for name, script := range map[string]string{"driver": driverScript, "initramfs init": systemdInitScript()} {
		sh := exec.Command("/bin/sh", "-n")
		sh.Stdin = strings.NewReader(script)
		if out, err := sh.CombinedOutput(); err != nil {
			t.Errorf("%s: sh -n: %v: %s", name, err, out)
		}
	}
	if !strings.Contains(systemdInitScript(), "for m in virtio_ring ") || !strings.Contains(systemdInitScript(), "exec switch_root /newroot /sbin/init") {
		t.Errorf("initramfs init:\n%s", systemdInitScript())
	}
	if f := fstab("grub"); !strings.Contains(f, "PARTLABEL=ESP /boot/efi vfat") || !strings.Contains(f, "PARTLABEL=data /var/lib/otad") {
		t.Errorf("PC fstab:\n%s", f)
	}
	if f := fstab("uboot"); strings.Contains(f, "/boot/efi") {
		t.Errorf("a board has no ESP:\n%s", f)
	}
	for _, w := range []string{"dpkg -i /root/otad.deb", "otad config check --unit-dropin >/etc/systemd/system/otad.service.d/board.conf",
		"systemctl enable --now otad", "journalctl -q _SYSTEMD_UNIT=otad.service -p $p"} {
		if !strings.Contains(driverScript, w) {
			t.Errorf("the driver does not run %q", w)
		}
	}
	mods := map[string][]byte{}
	for _, m := range SystemdModules() {
		mods[m] = []byte("ko:" + m)
	}
	out := t.TempDir() + "/initrd.img"
	if err := SystemdInitramfs([]byte("busybox"), mods, out); err != nil {
		t.Fatal(err)
	}
	delete(mods, "ext4")
	if err := SystemdInitramfs([]byte("busybox"), mods, out); err == nil || !strings.Contains(err.Error(), "ext4") {
		t.Errorf("a missing module: %v", err)
	}
}
