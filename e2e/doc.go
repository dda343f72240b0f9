// Package e2e boots real disk images in QEMU (OVMF + GRUB + the Debian kernel, TCG)
// and drives otad through updates over MQTT and HTTP from the host.
//
// The helpers in this package build everything from Debian tools without loop
// devices or mounts: a busybox initramfs per slot userland (the root stays in
// RAM, so neither slot is ever mounted), ext4 slot filesystems made with
// `mkfs.ext4 -d`, a FAT ESP filled with mtools holding GRUB, the shipped
// packaging/bootloader/grub.cfg and a 1024-byte grubenv, an ext4 data partition
// for otad's journal, and a GPT disk laid out with sgdisk.
//
// The scenarios live in e2e_test.go behind the `e2e` build tag, so `go test ./...`
// only runs the fast unit tests of the helpers:
//
//	go test -tags e2e -v -timeout 25m ./e2e/                      # all scenarios (make e2e)
//	go test -tags e2e -v -run 'TestQEMU/1_' ./e2e/                 # one scenario
//	E2E_LOGS=/tmp/e2e-logs go test -tags e2e ./e2e/                # keep every serial console
//
// Debian packages: qemu-system-x86 ovmf grub-efi-amd64-bin grub-common
// busybox-static linux-image-amd64 mtools dosfstools e2fsprogs gdisk fdisk
// mosquitto (and cpio for one unit test).
package e2e
