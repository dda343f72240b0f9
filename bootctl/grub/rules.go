package grub

import (
	"maps"
	"strings"

	"github.com/otad/otad/bootctl"
	"github.com/otad/otad/ota"
)

// Variable names of RAUC's GRUB scheme (docs/contract/bootloaders.md).
const OrderVar = "ORDER"

// OKVar and TryVar name a slot's variables, e.g. "A_OK", "A_TRY".
func OKVar(slot ota.Slot) string  { return string(slot) + "_OK" }
func TryVar(slot ota.Slot) string { return string(slot) + "_TRY" }

func schemeVars() []string {
	return []string{OrderVar, OKVar(ota.SlotA), TryVar(ota.SlotA), OKVar(ota.SlotB), TryVar(ota.SlotB)}
}

// effective returns the five variables as grub.cfg sees them after load_env: when
// none is set (no readable or an unprovisioned grubenv) the factory state, slot A
// committed; otherwise unset ORDER is "A B" and unset x_OK / x_TRY are 0.
func effective(vars map[string]string) map[string]string {
	e := map[string]string{}
	any := false
	for _, k := range schemeVars() {
		e[k] = vars[k]
		any = any || vars[k] != ""
	}
	if !any {
		return map[string]string{OrderVar: bootctl.DefaultOrder, "A_OK": "1", "A_TRY": "0", "B_OK": "0", "B_TRY": "0"}
	}
	if e[OrderVar] == "" {
		e[OrderVar] = bootctl.DefaultOrder
	}
	for _, s := range ota.Slots() {
		for _, k := range []string{OKVar(s), TryVar(s)} {
			if e[k] == "" {
				e[k] = "0"
			}
		}
	}
	return e
}

// walkOrder is the list grub.cfg loops over: "${ORDER} A B", so a slot left out
// of (or torn out of) ORDER is still tried after the listed ones.
func walkOrder(order string) []ota.Slot {
	return bootctl.OrderSlots(order + " A B")
}

func bootable(e map[string]string, s ota.Slot) bool {
	return e[OKVar(s)] == "1" && e[TryVar(s)] == "0"
}

// Pick is the decision logic of the shipped packaging/bootloader/grub.cfg,
// written once (a test runs grub.cfg's own logic against it).
//
// Walking ORDER (then any slot it leaves out), the first slot with x_OK=1 and
// x_TRY=0 gets x_TRY=1 and boots; otad's mark good sets x_TRY=0 again. When none
// qualifies, every slot with x_OK=1 (a completely written, verified image) gets
// x_TRY=0 and the walk is repeated: trying a verified image again beats not
// booting at all. A slot with x_OK=0 may be half written and never boots; with no
// x_OK=1 slot at all the result is "" (grub.cfg halts). newVars is the environment
// after save_env (vars itself is not modified).
func Pick(vars map[string]string) (slot ota.Slot, newVars map[string]string) {
	e := effective(vars)
	for pass := 0; pass < 2; pass++ {
		if pass == 1 {
			for _, s := range ota.Slots() {
				if e[OKVar(s)] == "1" {
					e[TryVar(s)] = "0"
				}
			}
		}
		for _, s := range walkOrder(e[OrderVar]) {
			if bootable(e, s) {
				e[TryVar(s)] = "1"
				nv := maps.Clone(vars)
				if nv == nil {
					nv = map[string]string{}
				}
				maps.Copy(nv, e)
				return s, nv
			}
		}
	}
	return "", maps.Clone(vars)
}

// grubState is the bootctl view: bootable = x_OK=1 and x_TRY=0, no counter.
func grubState(vars map[string]string) bootctl.State {
	e := effective(vars)
	st := bootctl.State{Order: walkOrder(e[OrderVar]), Slots: map[ota.Slot]bootctl.BootEntry{}}
	for _, s := range ota.Slots() {
		st.Slots[s] = bootctl.BootEntry{Bootable: bootable(e, s), AttemptsLeft: -1}
	}
	return st
}

// applyMark returns the five variables to write for a mark: the effective state
// (so a first write to an unprovisioned grubenv does not lose the factory
// defaults) with the mark applied.
func applyMark(vars map[string]string, mark string, slot ota.Slot) map[string]string {
	e := effective(vars)
	switch mark {
	case markBad:
		// Out of ORDER, by the rule the U-Boot backend follows (RAUC's): only
		// mark active puts it back. (grub.cfg tries a slot left out of ORDER
		// last, but never one with x_OK=0.)
		e[OrderVar] = keepLength(strings.Join(bootctl.OrderWithout(e[OrderVar], slot), " "), e[OrderVar])
		e[OKVar(slot)], e[TryVar(slot)] = "0", "0"
	case markActive:
		e[OrderVar] = keepLength(strings.Join(append([]string{string(slot)}, bootctl.OrderWithout(e[OrderVar], slot)...), " "), e[OrderVar])
		e[OKVar(slot)], e[TryVar(slot)] = "1", "0"
	case markGood:
		e[OKVar(slot)], e[TryVar(slot)] = "1", "0"
	}
	return e
}

// keepLength pads a shorter new ORDER with blanks to the old one's length
// ("A B" without B is "A  "): the grubenv is rewritten in place, and a value
// of unchanged length rewrites only its own bytes, so a power cut mid-write
// cannot shift and tear the lines after it. The scripts split ORDER on blanks.
func keepLength(order, old string) string {
	if n := len(old) - len(order); n > 0 {
		return order + strings.Repeat(" ", n)
	}
	return order
}

const (
	markBad    = "bad"
	markActive = "active"
	markGood   = "good"
)
