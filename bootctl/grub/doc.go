// Package grub is the GRUB backend of bootctl: RAUC's ORDER / x_OK / x_TRY
// variables in the grubenv block that grub.cfg reads with load_env (docs/contract/bootloaders.md).
package grub
