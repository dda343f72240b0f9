package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/otad/otad/internal/testkit/testtool"
)

// Tool is a host program the harness runs, with the Debian package that ships it.
type Tool struct{ Name, Package string }

// Tools lists the host programs the image builder and the runner need.
func Tools() []Tool {
	return []Tool{
		{"qemu-system-x86_64", "qemu-system-x86"},
		{"grub-mkimage", "grub-common"},
		{"grub-editenv", "grub-common"},
		{"mkfs.vfat", "dosfstools"},
		{"mcopy", "mtools"},
		{"mmd", "mtools"},
		{"mkfs.ext4", "e2fsprogs"},
		{"sgdisk", "gdisk"},
		{"sfdisk", "fdisk"},
		{"timeout", "coreutils"},
		{"mosquitto", "mosquitto"},
	}
}

// Files the harness reads from Debian packages.
const (
	OVMFCode      = "/usr/share/OVMF/OVMF_CODE_4M.fd" // ovmf
	OVMFVars      = "/usr/share/OVMF/OVMF_VARS_4M.fd" // ovmf
	GrubEFIModDir = "/usr/lib/grub/x86_64-efi"        // grub-efi-amd64-bin
	BusyboxStatic = "/bin/busybox"                    // busybox-static
)

// ErrMissing reports a host tool or file that is not installed.
var ErrMissing = errors.New("not installed")

// Missing lists what is not installed, as "tool (apt package)" strings.
func Missing() []string {
	var out []string
	for _, t := range Tools() {
		if _, err := lookPath(t.Name); err != nil {
			out = append(out, fmt.Sprintf("%s (apt-get install %s)", t.Name, t.Package))
		}
	}
	for path, pkg := range map[string]string{
		OVMFCode:      "ovmf",
		OVMFVars:      "ovmf",
		GrubEFIModDir: "grub-efi-amd64-bin",
		BusyboxStatic: "busybox-static",
	} {
		if _, err := os.Stat(path); err != nil {
			out = append(out, fmt.Sprintf("%s (apt-get install %s)", path, pkg))
		}
	}
	if _, err := FindKernel(); err != nil {
		out = append(out, "a Debian kernel in /boot (apt-get install linux-image-amd64)")
	}
	return out
}

// lookPath finds a host tool where the tests do (testtool.Find: PATH and the
// sbin directories).
func lookPath(name string) (string, error) {
	if p, err := testtool.Find(name, ""); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%s: %w", name, ErrMissing)
}

// run runs a host tool and returns its stdout; the error carries the command
// line and stderr, which is what explains a failing mkfs or sgdisk.
func run(ctx context.Context, name string, args ...string) ([]byte, error) {
	path, err := lookPath(name)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, path, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return stdout.Bytes(), nil
}
