// Package bootctl defines the Bootloader interface the agent uses to flip A/B
// slots (docs/contract/installing.md) and the State both backends report. Backends live in
// sub-packages, each with the rules its shipped boot script implements:
// uboot (uboot.Pick, RAUC's BOOT_ORDER / BOOT_x_LEFT), grub (grub.Pick,
// ORDER / x_OK / x_TRY) and sim (a file-backed device that boots by the
// U-Boot rules).
package bootctl
