package node

import (
	"context"
	"fmt"
	"time"

	"github.com/otad/otad/bootctl"
	"github.com/otad/otad/device/config"

	"github.com/otad/otad/ota"
)

// BootEnvError is a boot environment otad cannot read at all: a U-Boot env
// never saved at the factory, both redundant copies with a bad CRC, a
// missing or corrupt grubenv. Nothing otad marks would reach the bootloader,
// so the daemon does not start; restarting cannot fix it (`otad run` exits
// with ota.ExitNeedsOperator, which the unit does not restart), and Recovery
// says what an operator runs.
type BootEnvError struct {
	Err      error
	Recovery string
}

func (e *BootEnvError) Error() string { return e.Err.Error() + "\n" + e.Recovery }
func (e *BootEnvError) Unwrap() error { return e.Err }

// checkBootEnv reads the boot environment once, at start: an error wrapping
// bootctl.ErrBadEnv is one otad cannot read at all (openBoot makes it a
// BootEnvError).
func checkBootEnv(bl bootctl.Bootloader) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := bl.State(ctx)
	return err
}

// recovery is what to run to write a valid environment that boots the
// running slot, with both slots' attempts as the boot script expects.
func recovery(cfg *config.Config, booted ota.Slot) string {
	b := cfg.Bootloader
	other := booted.Other()
	if booted == "" {
		// The command line names no slot (refused too): the reader fills it in.
		booted, other = "<running slot>", "<other slot>"
	}
	switch b.Type {
	case "uboot":
		return fmt.Sprintf(`The U-Boot environment (%s) has no valid copy: never saved at the factory, or every copy has a bad CRC.
U-Boot then boots from its built-in defaults and ignores what otad writes. To recover, write a valid environment
that keeps U-Boot's defaults (bootcmd and the rest) and boots the running slot, then start otad again:
  fw_setenv -c %s -f /etc/u-boot-initial-env BOOT_ORDER "%s %s" BOOT_%s_LEFT %d BOOT_%s_LEFT 0
(/etc/u-boot-initial-env is your U-Boot build's default environment: make u-boot-initial-env), or at the
U-Boot prompt: saveenv, then boot and run: fw_setenv -c %s BOOT_ORDER "%s %s"`,
			b.EnvConfig, b.EnvConfig, booted, other, booted, b.Attempts, other, b.EnvConfig, booted, other)
	case "grub":
		return fmt.Sprintf(`The GRUB environment block %s cannot be read. To recover, write a new one that boots the running
slot, then start otad again:
  grub-editenv %s create && grub-editenv %s set ORDER="%s %s" %s_OK=1 %s_TRY=0 %s_OK=0 %s_TRY=0`,
			b.EnvFile, b.EnvFile, b.EnvFile, booted, other, booted, booted, other, other)
	}
	return fmt.Sprintf("The simulated boot state %s cannot be read: remove it (it is made again on the next start).", b.EnvFile)
}
