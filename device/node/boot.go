package node

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/otad/otad/agent"
	"github.com/otad/otad/bootctl"
	"github.com/otad/otad/bootctl/grub"
	"github.com/otad/otad/bootctl/sim"
	"github.com/otad/otad/bootctl/uboot"
	"github.com/otad/otad/device/config"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/slots"
)

// BootIDFile is where Linux exposes the current boot's random ID.
const BootIDFile = "/proc/sys/kernel/random/boot_id"

func bootloader(cfg *config.Config) (bootctl.Bootloader, ota.Slot, string, agent.Rebooter, error) {
	b := cfg.Bootloader
	if b.Type == "sim" {
		s, err := sim.Open(b.EnvFile, b.Attempts)
		if err != nil {
			return nil, "", "", nil, err
		}
		booted, err := s.Booted()
		if err != nil {
			return nil, "", "", nil, err
		}
		id, err := s.BootID()
		if err != nil {
			return nil, "", "", nil, err
		}
		return s, booted, id, SimReboot{Sim: s}, nil
	}
	var bl bootctl.Bootloader
	var err error
	switch b.Type {
	case "uboot":
		bl, err = uboot.Open(b.EnvConfig, b.Attempts)
	case "grub":
		bl, err = grub.Open(b.EnvFile, b.Attempts)
	default:
		err = fmt.Errorf("%s: bootloader.type: unknown %q", cfg.Path, b.Type)
	}
	if err != nil {
		return nil, "", "", nil, err
	}
	booted, err := slots.ReadBooted(cfg.Slots.Cmdline, cfg.Slots.Devices())
	if err != nil {
		return nil, "", "", nil, err
	}
	id, err := os.ReadFile(BootIDFile)
	if err != nil {
		return nil, "", "", nil, fmt.Errorf("boot id: %w", err)
	}
	return bl, booted, strings.TrimSpace(string(id)), SystemReboot{}, nil
}

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
