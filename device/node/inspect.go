package node

import (
	"time"

	"errors"
	"log/slog"
	"os"

	"github.com/otad/otad/agent"
	"github.com/otad/otad/device/config"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/slots"
)

// Inspect judges an offer as this device would take it now, without
// fetching or writing anything (`otad info`): the offer checks with the
// trusted keys, the slot's capacity and the facts of the journal s, then the
// agent's own step (agent.Step) on a copy of s: whether it would start an
// install, wait as pending, find the device up to date, or find the offer
// ended before.
func Inspect(cfg *config.Config, s agent.State, booted ota.Slot, raw []byte) Verdict {
	targets := map[ota.Slot]slots.Target{}
	for slot, dev := range cfg.Slots.Devices() {
		targets[slot] = slots.File(dev)
	}
	keys, r := openKeys(cfg, slog.New(slog.DiscardHandler))
	if r != nil {
		return Verdict{Refused: r, State: s}
	}
	keys.inMemory() // a chain the offer carries is judged, not kept
	t, err := newChecker(cfg, keys, targets, nil).Check(raw, agent.FactsOf(s, booted, BuildTime()))
	if err != nil {
		return Verdict{Target: t, Refused: err, State: s}
	}
	t.Envelope = raw
	s = s.Clone()
	if s.Booted == "" {
		s.Booted = booted
	}
	// Judged as otad install would take the file (a person's explicit act):
	// an offer whose ending is retryable starts again
	// (docs/contract/commands.md, otad install and otad info).
	next, fx := agent.Step(s, policy(cfg), time.Now().UTC(), agent.EvOffer{Target: t, Local: true})
	return Verdict{Target: t, State: next, Effects: fx}
}

// Verdict is what Inspect found: the target the offer names (even when
// refused, if it is authentic), the refusal, and the state and effects the
// agent's step gives when it is not refused.
type Verdict struct {
	Target  agent.Target
	Refused error
	State   agent.State
	Effects []agent.Effect
}

// BootedSlot is the slot this device runs now, as otad run would find it,
// without writing anything: the kernel command line, or a simulated
// device's state file (slot A before its first run).
func BootedSlot(cfg *config.Config) (ota.Slot, error) {
	if cfg.Bootloader.Type == "sim" {
		if _, err := os.Stat(cfg.Bootloader.EnvFile); errors.Is(err, os.ErrNotExist) {
			return ota.SlotA, nil
		}
		b, r := openSim(cfg)
		if r != nil {
			return "", r
		}
		return b.booted, nil
	}
	booted, err := slots.ReadBooted(cfg.Slots.Cmdline, cfg.Slots.Devices())
	if err != nil {
		return "", refuse(cfg, "slots.cmdline", err)
	}
	return booted, nil
}
