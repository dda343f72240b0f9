package node

import (
	"fmt"
	"net/http"

	"github.com/otad/otad/agent"
	"github.com/otad/otad/bootctl/sim"
	"github.com/otad/otad/device/config"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/slots"
)

// Memory is a simulated device's storage kept in memory across its
// simulated reboots, as flash keeps it across real ones: the journal, the
// sim bootloader's state and both slots. A fleet of thousands in one
// process (otasim fleet) keeps no file per device, and a slot takes memory
// only while it is written.
type Memory struct {
	Journal *agent.MemJournal
	Boot    *sim.Sim
	Slots   map[ota.Slot]*slots.MemSlot
}

// NewMemory is a new device's storage: slots of slotSize bytes named after
// the device, the sim bootloader as from the factory (booted A).
func NewMemory(id string, slotSize int64, attempts int) (*Memory, error) {
	boot, err := sim.NewMemory(attempts)
	if err != nil {
		return nil, fmt.Errorf("simulated device %s: %w", id, err)
	}
	return &Memory{
		Journal: &agent.MemJournal{},
		Boot:    boot,
		Slots: map[ota.Slot]*slots.MemSlot{
			ota.SlotA: slots.NewMemSlot(id+":A (memory)", slotSize),
			ota.SlotB: slots.NewMemSlot(id+":B (memory)", slotSize),
		},
	}, nil
}

// BuildMemory makes the parts of a simulated device on m, as Build makes
// them from files: the sim bootloader, the journal and the slots in m;
// keys and the HTTP client are the caller's (a fleet shares them). cfg gives
// the policy (download, trust, commit, reboot); its paths are not used.
func BuildMemory(cfg *config.Config, m *Memory, keys *Keys, client *http.Client, opt Options) (*Parts, error) {
	booted, err := m.Boot.Booted()
	if err != nil {
		return nil, err
	}
	bootID, err := m.Boot.BootID()
	if err != nil {
		return nil, err
	}
	return parts(cfg, opt, storage{
		store: m.Journal, bl: m.Boot, booted: booted, bootID: bootID, reboot: SimReboot{Sim: m.Boot},
		mem: m.Slots, client: client, keys: keys,
	}), nil
}
