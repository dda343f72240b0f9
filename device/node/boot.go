package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"strings"

	"github.com/otad/otad/agent"
	"github.com/otad/otad/bootctl"
	"github.com/otad/otad/bootctl/grub"
	"github.com/otad/otad/bootctl/sim"
	"github.com/otad/otad/bootctl/uboot"
	"github.com/otad/otad/device/config"
	"github.com/otad/otad/ota"
)

// BootIDFile is where Linux exposes the current boot's random ID.
const BootIDFile = "/proc/sys/kernel/random/boot_id"

// agentRebooter is how the device reboots.
type agentRebooter = agent.Rebooter

// openSim opens a simulated device's bootloader file (creating it on the
// first run) and reads the booted slot from it.
func openSim(cfg *config.Config) (boot, *Refusal) {
	b := cfg.Bootloader
	s, err := sim.Open(b.EnvFile, b.Attempts)
	if err == nil {
		var bt boot
		if bt.booted, err = s.Booted(); err == nil {
			if bt.bootID, err = s.BootID(); err == nil {
				bt.bl, bt.reboot = s, SimReboot{Sim: s}
				return bt, nil
			}
		}
	}
	if errors.Is(err, bootctl.ErrBadEnv) {
		return boot{}, &Refusal{Path: cfg.Path, Key: "bootloader.env_file", Code: ota.ExitNeedsOperator,
			Err: &BootEnvError{Err: err, Recovery: recovery(cfg, ota.SlotA)}}
	}
	return boot{}, refuse(cfg, "bootloader.env_file", err)
}

// openBackend opens the U-Boot or GRUB environment the config names; key is
// the config key that names it.
func openBackend(cfg *config.Config, log *slog.Logger) (bl bootctl.Bootloader, key string, err error) {
	b := cfg.Bootloader
	switch b.Type {
	case "uboot":
		bl, err = uboot.Open(b.EnvConfig, b.Attempts, log)
		return bl, "bootloader.env_config", err
	case "grub":
		bl, err = grub.Open(b.EnvFile, b.Attempts, log)
		return bl, "bootloader.env_file", err
	}
	return nil, "bootloader.type", fmt.Errorf("unknown %q", b.Type)
}

func trimSpace(b []byte) string { return strings.TrimSpace(string(b)) }

// orderedBootloader gives the agent the boot order from the backend's state.
type orderedBootloader struct{ bootctl.Bootloader }

func (b orderedBootloader) Order(ctx context.Context) ([]ota.Slot, error) {
	st, err := b.State(ctx)
	if err != nil {
		return nil, err
	}
	return st.Order, nil
}

// SimReboot "reboots" a simulated device: the boot script's rules pick the
// next slot, and the agent ends as a real reboot would end it.
type SimReboot struct{ Sim *sim.Sim }

// Reboot applies the boot rules and ends Run.
func (r SimReboot) Reboot(context.Context) error {
	if _, err := r.Sim.Boot(); err != nil {
		return err
	}
	return agent.ErrRebooted
}

// SystemReboot asks systemd to reboot; systemd then stops the agent.
type SystemReboot struct{}

// Reboot runs `systemctl reboot`.
func (SystemReboot) Reboot(ctx context.Context) error {
	out, err := exec.CommandContext(ctx, "systemctl", "reboot").CombinedOutput()
	if err != nil {
		return fmt.Errorf("systemctl reboot: %w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}
