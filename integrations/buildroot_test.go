package integrations

import (
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/otad/otad/internal/testkit/testtool"
)

const board = "buildroot/board/otad-ab/"

// fragment reads the Buildroot fragment's settings, $(BR2_EXTERNAL_OTAD_PATH)
// resolved to this tree's buildroot/.
func fragment(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(board + "otad.fragment")
	if err != nil {
		t.Fatal(err)
	}
	ext, err := filepath.Abs("buildroot")
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^(BR2_\w+)=(.*)$`).FindAllStringSubmatch(string(b), -1) {
		set[m[1]] = strings.ReplaceAll(strings.Trim(m[2], `"`), "$(BR2_EXTERNAL_OTAD_PATH)", ext)
	}
	return set
}

// TestBuildrootFragmentUsesTheBootScript: the example's boot.scr is the
// repository's boot.cmd (which /usr/share/doc would have carried, had
// Buildroot kept it), and the scripts and layout it names exist.
func TestBuildrootFragmentUsesTheBootScript(t *testing.T) {
	set := fragment(t)
	for key, want := range map[string]string{
		"BR2_PACKAGE_OTAD":                                "y",
		"BR2_INIT_SYSTEMD":                                "y",
		"BR2_LINUX_KERNEL_INSTALL_TARGET":                 "y", // boot.cmd loads the slot's /boot/Image
		"BR2_PACKAGE_HOST_UBOOT_TOOLS_BOOT_SCRIPT":        "y",
		"BR2_ROOTFS_POST_IMAGE_SCRIPT":                    "support/scripts/genimage.sh",
		"BR2_PACKAGE_HOST_UBOOT_TOOLS_BOOT_SCRIPT_SOURCE": "",
	} {
		if got, ok := set[key]; !ok || want != "" && got != want {
			t.Errorf("otad.fragment: %s=%q, want %q", key, got, want)
		}
	}
	src, err := filepath.EvalSymlinks(set["BR2_PACKAGE_HOST_UBOOT_TOOLS_BOOT_SCRIPT_SOURCE"])
	want, _ := filepath.Abs("../packaging/bootloader/boot.cmd")
	if err != nil || src != want {
		t.Errorf("the boot script source is %q (%v), want the repository's %s", src, err, want)
	}
	if fi, err := os.Stat(set["BR2_ROOTFS_POST_BUILD_SCRIPT"]); err != nil || fi.Mode()&0o111 == 0 {
		t.Errorf("post-build script %s: %v, not executable", set["BR2_ROOTFS_POST_BUILD_SCRIPT"], err)
	}
	if args := set["BR2_ROOTFS_POST_IMAGE_SCRIPT_ARGS"]; !strings.HasPrefix(args, "-c ") {
		t.Errorf("BR2_ROOTFS_POST_IMAGE_SCRIPT_ARGS=%q: no genimage config", args)
	} else if _, err := os.Stat(strings.TrimPrefix(args, "-c ")); err != nil {
		t.Error(err)
	}
}

// TestBuildrootImageLayout builds the example's image with genimage from a
// real boot.scr and root file system, and reads its partition table: the
// slots are partitions 2 and 3, where boot.cmd looks, each a copy of
// rootfs.ext4; the boot partition holds boot.scr; the data partition is the
// ext4 labelled otad-data that post-build.sh's fstab line mounts, and that
// line is added once.
func TestBuildrootImageLayout(t *testing.T) {
	t.Parallel()
	genimage := testtool.Require(t, "genimage", "genimage")
	mkimage := testtool.Require(t, "mkimage", "u-boot-tools")
	mkfs := testtool.Require(t, "mkfs.ext4", "e2fsprogs")
	testtool.Require(t, "mkfs.vfat", "dosfstools")
	testtool.Require(t, "mcopy", "mtools")
	dir := t.TempDir()
	in, target := filepath.Join(dir, "images"), filepath.Join(dir, "target")
	for _, d := range []string{in, filepath.Join(target, "etc")} {
		os.MkdirAll(d, 0o755)
	}
	os.WriteFile(filepath.Join(target, "etc", "fstab"), []byte("/dev/root / auto rw 0 1\n"), 0o644)
	for range 2 {
		if out, err := exec.Command("./"+board+"post-build.sh", target).CombinedOutput(); err != nil {
			t.Fatalf("post-build.sh: %v\n%s", err, out)
		}
	}
	fstab, _ := os.ReadFile(filepath.Join(target, "etc", "fstab"))
	if n := strings.Count(string(fstab), "LABEL=otad-data\t/var/lib/otad\text4"); n != 1 {
		t.Errorf("fstab after post-build.sh twice has %d otad-data lines:\n%s", n, fstab)
	}
	run := func(name string, args ...string) {
		t.Helper()
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", filepath.Base(name), err, out)
		}
	}
	run(mkimage, "-A", "arm64", "-T", "script", "-C", "none", "-d", "../packaging/bootloader/boot.cmd", filepath.Join(in, "boot.scr"))
	rootfs := filepath.Join(in, "rootfs.ext4")
	run(mkfs, "-q", "-F", "-d", target, "-L", "rootfs", rootfs, "8M")
	// The layout as shipped, its sizes made small (the slots' 512M
	// would be most of the test's time and disk).
	cfg, err := os.ReadFile(board + "genimage.cfg")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(cfg), "size = 512M"); n != 2 {
		t.Errorf("genimage.cfg: %d slots of 512M, want 2", n)
	}
	small := filepath.Join(dir, "genimage.cfg")
	os.WriteFile(small, []byte(strings.NewReplacer("size = 512M", "size = 16M", "size = 64M", "size = 4M").Replace(string(cfg))), 0o644)
	run(genimage, "--config", small, "--inputpath", in, "--outputpath", filepath.Join(dir, "out"),
		"--rootpath", target, "--tmppath", filepath.Join(dir, "tmp"))

	img, err := os.ReadFile(filepath.Join(dir, "out", "sdcard.img"))
	if err != nil {
		t.Fatal(err)
	}
	root, _ := os.ReadFile(rootfs)
	part := func(i int) (boot bool, typ byte, data []byte) {
		e := img[446+16*i:]
		start, size := int64(binary.LittleEndian.Uint32(e[8:])), int64(binary.LittleEndian.Uint32(e[12:]))
		if 512*(start+size) > int64(len(img)) {
			t.Fatalf("partition %d ends past the image", i+1)
		}
		return e[0] == 0x80, e[4], img[512*start : 512*(start+size)]
	}
	boot, typ, vfat := part(0)
	if !boot || typ != 0x0c || !bytes.Contains(vfat, []byte("BOOT    SCR")) {
		t.Errorf("partition 1: bootable %v, type %#x, boot.scr in it %v; want a bootable FAT with boot.scr", boot, typ, bytes.Contains(vfat, []byte("BOOT    SCR")))
	}
	for i, slot := range []string{"A", "B"} {
		_, typ, data := part(1 + i)
		if typ != 0x83 || !bytes.HasPrefix(data, root) || len(data) < 2*len(root) {
			t.Errorf("partition %d (slot %s): type %#x, %d bytes; want rootfs.ext4 with room to grow", 2+i, slot, typ, len(data))
		}
	}
	_, typ, data := part(3)
	if typ != 0x83 || binary.LittleEndian.Uint16(data[1024+0x38:]) != 0xef53 || string(bytes.TrimRight(data[1024+0x78:1024+0x88], "\x00")) != "otad-data" {
		t.Errorf("partition 4: type %#x; want an ext4 labelled otad-data", typ)
	}
}
