// Package e2e boots real disk images in QEMU (OVMF + GRUB + the Debian kernel, TCG)
// and drives otad through updates over MQTT and HTTP from the host.
//
// The helpers in this package build everything from Debian tools without loop
// devices or mounts: a busybox initramfs per slot userland, ext4 slot filesystems
// made with `mkfs.ext4 -d`, a FAT ESP filled with mtools, and a GPT disk laid out
// with sgdisk. The scenarios live in e2e_test.go behind the `e2e` build tag
// (`make e2e`), so `go test ./...` only runs the fast unit tests of the helpers.
package e2e
