// Package e2e boots real disk images in QEMU (TCG) and drives otad through
// updates over MQTT and HTTP from the host, on two machines:
//
//   - x86_64 q35 with OVMF, GRUB and the shipped grub.cfg, otad's grub backend
//     (TestQEMU);
//   - arm64 virt with Debian's qemu_arm64 U-Boot in pflash, its environment in
//     the second pflash, the shipped boot.cmd (and RAUC's example script),
//     otad's uboot backend reaching the env through that flash given to Linux
//     as a second virtio disk (TestUBoot). Each QEMU run is one boot attempt
//     (-no-reboot), so U-Boot's own counting is what the scenarios watch;
//   - a Debian bookworm guest with systemd as PID 1 (debootstrap, cached
//     under ~/.cache/otad-e2e/systemd) and otad's .deb, on the x86_64 PC and
//     on a U-Boot style layout (TestSystemd): the shipped unit under a real
//     systemd.
//
// The helpers build everything from Debian tools without loop devices or
// mounts: a busybox initramfs per slot userland (the root stays in RAM, so
// neither slot is ever mounted), ext4 slot filesystems made with
// `mkfs.ext4 -d`, a FAT ESP or boot partition filled with mtools, an ext4 data
// partition for otad's journal, and a GPT disk laid out with sgdisk.
//
// The scenarios live in *_test.go files behind the `e2e` build tag, so
// `go test ./...` only runs the fast unit tests of the helpers:
//
//	go test -tags e2e -v -timeout 25m ./e2e/                      # all scenarios (make e2e)
//	go test -tags e2e -v -run 'TestQEMU/1_' ./e2e/                 # one scenario
//	E2E_LOGS=/tmp/e2e-logs go test -tags e2e ./e2e/                # keep every serial console
//
// What the machines boot, and why (QEMU version, env flash layout, TCG
// timings, kernel modules): docs/e2e.md.
//
// Debian packages: qemu-system-x86 ovmf grub-efi-amd64-bin grub-common
// busybox-static linux-image-amd64 mtools dosfstools e2fsprogs gdisk fdisk
// mosquitto (and cpio for one unit test); for TestUBoot also u-boot-qemu,
// u-boot-tools, libubootenv-tool and qemu-system-arm >= 9.0.1 (bookworm-backports),
// plus Debian's arm64 kernel and busybox-static from scripts/e2e-arm64-deps.
package e2e
