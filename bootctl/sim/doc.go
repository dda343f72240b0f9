// Package sim is a file-backed simulated bootloader for tests and the demo
// (docs/contract/config.md). It keeps the U-Boot variables (BOOT_ORDER, BOOT_x_LEFT), the slot it
// booted last and a boot counter in one small JSON file, replaced atomically.
// Boot ("power on") applies uboot.Pick, the same rules as the shipped U-Boot
// boot script.
package sim
