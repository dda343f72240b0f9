// Package uboot is the U-Boot backend of bootctl: it reads and writes the
// U-Boot environment natively (no fw_setenv), following /etc/fw_env.config the
// way libubootenv does, with RAUC's BOOT_ORDER / BOOT_x_LEFT variables (docs/contract/bootloaders.md).
//
// rules.go holds the boot script's decision logic over those variables (Pick)
// and the marks (SetBad, SetActive, SetGood), written once so the sim backend
// and packaging/bootloader/boot.cmd cannot drift apart: a test runs the script
// itself against Pick.
package uboot
