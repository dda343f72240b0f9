package e2e

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Kernel is a Debian kernel image and its module tree.
type Kernel struct {
	Image      string // /boot/vmlinuz-<release>
	ModulesDir string // /lib/modules/<release>
}

// FindKernel picks the host's newest /boot/vmlinuz-* that has a module tree.
func FindKernel() (Kernel, error) { return findKernelIn("/") }

// findKernelIn picks the newest root/boot/vmlinuz-* with a root/lib/modules tree.
func findKernelIn(root string) (Kernel, error) {
	images, _ := filepath.Glob(filepath.Join(root, "boot", "vmlinuz-*"))
	sort.Sort(sort.Reverse(sort.StringSlice(images)))
	for _, img := range images {
		rel := strings.TrimPrefix(filepath.Base(img), "vmlinuz-")
		dir := filepath.Join(root, "lib", "modules", rel)
		if st, err := os.Stat(dir); err == nil && st.IsDir() {
			return Kernel{Image: img, ModulesDir: dir}, nil
		}
	}
	return Kernel{}, fmt.Errorf("no %s with a lib/modules tree: %w", filepath.Join(root, "boot", "vmlinuz-*"), ErrMissing)
}

// ReadModules reads the named modules' .ko files from the kernel's tree
// (Debian ships them uncompressed).
func (k Kernel) ReadModules(names []string) (map[string][]byte, error) {
	want := map[string]bool{}
	for _, n := range names {
		want[n+".ko"] = true
	}
	out := map[string][]byte{}
	err := filepath.WalkDir(filepath.Join(k.ModulesDir, "kernel"), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !want[d.Name()] {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out[strings.TrimSuffix(d.Name(), ".ko")] = b
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("kernel modules in %s: %w", k.ModulesDir, err)
	}
	for _, n := range names {
		if _, ok := out[n]; !ok {
			return nil, fmt.Errorf("kernel module %s.ko not found under %s (compressed modules are not supported)", n, k.ModulesDir)
		}
	}
	return out, nil
}

// WriteInitramfs writes the archive gzipped, which every Debian kernel unpacks.
func WriteInitramfs(a *Archive, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	zw, err := gzip.NewWriterLevel(f, gzip.BestSpeed)
	if err != nil {
		f.Close()
		return err
	}
	if _, err := a.WriteTo(zw); err != nil {
		f.Close()
		return fmt.Errorf("initramfs %s: %w", path, err)
	}
	if err := zw.Close(); err != nil {
		f.Close()
		return fmt.Errorf("initramfs %s: %w", path, err)
	}
	return f.Close()
}

// BuildSlotImage makes the ext4 filesystem of one slot: the kernel and the
// userland's initramfs under /boot (where grub.cfg and boot.cmd look), plus the version
// file. The image is sizeMiB large; it is also the update payload.
func BuildSlotImage(ctx context.Context, work string, k Kernel, u Userland, out string, sizeMiB int) error {
	stage, err := os.MkdirTemp(work, "slot-"+u.Version+"-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(stage)
	if err := os.MkdirAll(filepath.Join(stage, "boot"), 0o755); err != nil {
		return err
	}
	a, err := u.Archive()
	if err != nil {
		return err
	}
	if err := WriteInitramfs(a, filepath.Join(stage, "boot", "initrd.img")); err != nil {
		return err
	}
	if err := copyFile(k.Image, filepath.Join(stage, "boot", u.Platform.KernelFile)); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(stage, "otad-image-version"), []byte(u.Version+"\n"), 0o644); err != nil {
		return err
	}
	os.Remove(out)
	// Fixed UUID and hash seed would make the image reproducible, but the tests
	// only need A and B to differ, which the version already guarantees.
	_, err = run(ctx, "mkfs.ext4", "-q", "-F", "-L", "root-"+u.Version, "-d", stage, out, strconv.Itoa(sizeMiB)+"M")
	return err
}

// ESPFiles are the boot files placed in the ESP's /EFI/BOOT.
type ESPFiles struct {
	GrubEFI string // BOOTX64.EFI from BuildGrubEFI
	GrubCfg string // packaging/bootloader/grub.cfg
	Grubenv string // from BuildGrubenv
}

// GrubModules are the GRUB modules built into BOOTX64.EFI (docs/e2e.md).
func GrubModules() []string {
	return []string{"part_gpt", "fat", "ext2", "normal", "linux", "loadenv", "test", "echo", "configfile",
		"search", "sleep", "reboot", "halt", "serial", "terminal", "regexp"}
}

// BuildGrubEFI makes a standalone GRUB EFI binary whose prefix is the ESP's
// /EFI/BOOT, where grub.cfg and grubenv sit beside it.
func BuildGrubEFI(ctx context.Context, out string) error {
	args := append([]string{"-O", "x86_64-efi", "-d", GrubEFIModDir, "-p", "/EFI/BOOT", "-o", out}, GrubModules()...)
	_, err := run(ctx, "grub-mkimage", args...)
	return err
}

// BuildGrubenv creates a 1024-byte grubenv holding vars (GRUB edits it in place).
func BuildGrubenv(ctx context.Context, out string, vars map[string]string) error {
	os.Remove(out)
	if _, err := run(ctx, "grub-editenv", out, "create"); err != nil {
		return err
	}
	keys := make([]string, 0, len(vars))
	for k := range vars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	args := []string{out, "set"}
	for _, k := range keys {
		args = append(args, k+"="+vars[k])
	}
	_, err := run(ctx, "grub-editenv", args...)
	return err
}

// BuildESP makes a FAT filesystem image of sizeMiB with the boot files.
func BuildESP(ctx context.Context, out string, sizeMiB int, f ESPFiles) error {
	os.Remove(out)
	if _, err := run(ctx, "mkfs.vfat", "-n", "ESP", "-C", out, strconv.Itoa(sizeMiB*1024)); err != nil {
		return err
	}
	if _, err := run(ctx, "mmd", "-i", out, "::/EFI", "::/EFI/BOOT"); err != nil {
		return err
	}
	for src, dst := range map[string]string{f.GrubEFI: "BOOTX64.EFI", f.GrubCfg: "grub.cfg", f.Grubenv: "grubenv"} {
		if _, err := run(ctx, "mcopy", "-i", out, src, "::/EFI/BOOT/"+dst); err != nil {
			return err
		}
	}
	return nil
}

// Partition numbers of the disk layout: grub.cfg boots (hd0,gpt2) and (hd0,gpt3).
const (
	PartESP   = 1
	PartSlotA = 2
	PartSlotB = 3
	PartData  = 4 // otad's state_dir: the journal must survive reboots
)

// Layout sizes the partitions, in MiB. BootName is partition 1's GPT name:
// "ESP" when empty (a PC); a U-Boot board's boot partition is "boot".
type Layout struct {
	ESP, Slot, Data int
	BootName        string
}

// DefaultLayout fits a Debian kernel plus a ~6 MB initramfs per slot.
func DefaultLayout() Layout { return Layout{ESP: 32, Slot: 48, Data: 16} }

// Partition is one partition's place in the disk image, in bytes.
type Partition struct{ Start, Size int64 }

// Disk is a GPT disk image file.
type Disk struct {
	Path  string
	Parts map[int]Partition
}

// BuildDisk partitions a new disk image and copies the filesystem images into
// it. images maps a partition number to an image file; partitions without one
// stay zero.
func BuildDisk(ctx context.Context, path string, l Layout, images map[int]string) (*Disk, error) {
	const mib = 1 << 20
	// 1 MiB in front (GPT + alignment) and 1 MiB behind (backup GPT).
	size := int64(1+l.ESP+2*l.Slot+l.Data+1) * mib
	os.Remove(path)
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return nil, err
	}
	f.Close()
	// No -q: with it sgdisk exits 0 without writing anything (docs/e2e.md).
	boot, bootType := "ESP", "EF00"
	if l.BootName != "" {
		boot, bootType = l.BootName, "0700"
	}
	_, err = run(ctx, "sgdisk",
		"-n", fmt.Sprintf("1:2048:+%dM", l.ESP), "-t", "1:"+bootType, "-c", "1:"+boot,
		"-n", fmt.Sprintf("2:0:+%dM", l.Slot), "-t", "2:8300", "-c", "2:rootA",
		"-n", fmt.Sprintf("3:0:+%dM", l.Slot), "-t", "3:8300", "-c", "3:rootB",
		"-n", fmt.Sprintf("4:0:+%dM", l.Data), "-t", "4:8300", "-c", "4:data",
		path)
	if err != nil {
		return nil, err
	}
	parts, err := ReadPartitions(ctx, path)
	if err != nil {
		return nil, err
	}
	d := &Disk{Path: path, Parts: parts}
	for n, img := range images {
		if err := d.WritePartition(n, img); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// sfdiskTable is the part of `sfdisk -J` output the harness reads.
type sfdiskTable struct {
	PartitionTable struct {
		SectorSize int64 `json:"sectorsize"`
		Partitions []struct {
			Node  string `json:"node"`
			Start int64  `json:"start"`
			Size  int64  `json:"size"`
		} `json:"partitions"`
	} `json:"partitiontable"`
}

// ReadPartitions reads the partition table back with sfdisk.
func ReadPartitions(ctx context.Context, path string) (map[int]Partition, error) {
	out, err := run(ctx, "sfdisk", "-J", path)
	if err != nil {
		return nil, err
	}
	return parseSfdisk(out, path)
}

func parseSfdisk(out []byte, path string) (map[int]Partition, error) {
	var t sfdiskTable
	if err := json.Unmarshal(out, &t); err != nil {
		return nil, fmt.Errorf("sfdisk -J %s: %w", path, err)
	}
	ss := t.PartitionTable.SectorSize
	if ss == 0 {
		ss = 512
	}
	parts := map[int]Partition{}
	for _, p := range t.PartitionTable.Partitions {
		// Nodes are the image path followed by the partition number.
		i := len(p.Node)
		for i > 0 && p.Node[i-1] >= '0' && p.Node[i-1] <= '9' {
			i--
		}
		n, err := strconv.Atoi(p.Node[i:])
		if err != nil || p.Start <= 0 || p.Size <= 0 {
			return nil, fmt.Errorf("sfdisk -J %s: partition %q: bad node, start or size", path, p.Node)
		}
		parts[n] = Partition{Start: p.Start * ss, Size: p.Size * ss}
	}
	if len(parts) == 0 {
		return nil, fmt.Errorf("sfdisk -J %s: no partitions", path)
	}
	return parts, nil
}

// WritePartition copies a filesystem image into partition n (like dd
// seek=START conv=notrunc), refusing images larger than the partition.
func (d *Disk) WritePartition(n int, image string) error {
	p, ok := d.Parts[n]
	if !ok {
		return fmt.Errorf("disk %s: no partition %d", d.Path, n)
	}
	src, err := os.Open(image)
	if err != nil {
		return err
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return err
	}
	if st.Size() > p.Size {
		return fmt.Errorf("disk %s: image %s (%d bytes) does not fit partition %d (%d bytes)", d.Path, image, st.Size(), n, p.Size)
	}
	dst, err := os.OpenFile(d.Path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := io.Copy(io.NewOffsetWriter(dst, p.Start), src); err != nil {
		dst.Close()
		return fmt.Errorf("disk %s: partition %d: %w", d.Path, n, err)
	}
	return dst.Close()
}

// ReadGrubenv copies the grubenv out of the disk image's ESP with mtools and
// lists it with grub-editenv, the way an operator would check a device's disk.
func (d *Disk) ReadGrubenv(ctx context.Context, work string) (map[string]string, error) {
	p, ok := d.Parts[PartESP]
	if !ok {
		return nil, fmt.Errorf("disk %s: no ESP", d.Path)
	}
	tmp := filepath.Join(work, "grubenv.read")
	os.Remove(tmp)
	if _, err := run(ctx, "mcopy", "-n", "-o", "-i", fmt.Sprintf("%s@@%d", d.Path, p.Start), "::/EFI/BOOT/grubenv", tmp); err != nil {
		return nil, err
	}
	st, err := os.Stat(tmp)
	if err != nil {
		return nil, err
	}
	if st.Size() != 1024 {
		return nil, fmt.Errorf("grubenv in %s is %d bytes, want 1024 (GRUB only edits it in place)", d.Path, st.Size())
	}
	out, err := run(ctx, "grub-editenv", tmp, "list")
	if err != nil {
		return nil, err
	}
	return parseEnvList(out), nil
}

// parseEnvList reads `grub-editenv list` output: one NAME=VALUE a line.
func parseEnvList(out []byte) map[string]string {
	env := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && k != "" {
			env[k] = v
		}
	}
	return env
}

// CopyFile copies src to dst (disk images between scenarios, OVMF variables).
func CopyFile(src, dst string) error { return copyFile(src, dst) }

func copyFile(src, dst string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}()
	if _, err := io.Copy(out, in); err != nil {
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	return nil
}
