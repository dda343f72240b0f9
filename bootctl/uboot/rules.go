package uboot

import (
	"fmt"
	"maps"
	"strconv"
	"strings"

	"github.com/otad/otad/bootctl"
	"github.com/otad/otad/ota"
)

// OrderVar is the U-Boot boot order variable (RAUC-compatible, SPEC §7). The
// sim backend uses the same variables.
const OrderVar = "BOOT_ORDER"

// LeftVar is the name of slot's attempt counter, e.g. "BOOT_A_LEFT".
func LeftVar(slot ota.Slot) string { return "BOOT_" + string(slot) + "_LEFT" }

// MaxAttempts bounds the configured attempts: U-Boot's setexpr counts in hex
// while its test -gt compares in decimal, and the two agree only on one digit.
const MaxAttempts = 9

// CheckAttempts validates a configured attempt count for the U-Boot scheme.
func CheckAttempts(attempts int) error {
	if attempts < 1 || attempts > MaxAttempts {
		return fmt.Errorf("attempts %d: must be 1..%d (U-Boot's setexpr counts in hex, test -gt in decimal)", attempts, MaxAttempts)
	}
	return nil
}

// testInt mirrors U-Boot's `test A -gt B`, which reads its operands with
// simple_strtol(s, NULL, 10): an optional '-', then leading decimal digits; anything
// else reads as 0.
func testInt(s string) int64 {
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var n int64
	for i := 0; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		n = n*10 + int64(s[i]-'0')
		if n > 1<<40 { // far beyond any counter; avoid overflow on junk
			break
		}
	}
	if neg {
		return -n
	}
	return n
}

// setexprDec mirrors `setexpr X ${X} - 1`: U-Boot parses setexpr operands with
// simple_strtoul(s, NULL, 16) (optional 0x) and prints the result with %lx.
func setexprDec(s string) string {
	t := strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X")
	var n uint64
	for i := 0; i < len(t); i++ {
		d, ok := hexDigit(t[i])
		if !ok {
			break
		}
		n = n<<4 | uint64(d)
	}
	return strconv.FormatUint(n-1, 16)
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// orderSlots returns the A/B names of a BOOT_ORDER/ORDER value in order, once each.
// The scripts split it on blanks like any shell word list.
func orderSlots(order string) []ota.Slot {
	var out []ota.Slot
	seen := map[ota.Slot]bool{}
	for _, f := range strings.Fields(order) {
		if w := ota.Slot(f); w.Valid() && !seen[w] {
			seen[w] = true
			out = append(out, w)
		}
	}
	return out
}

// defaults applies the boot script's first three lines: unset (or empty)
// variables get their defaults.
func defaults(vars map[string]string, attempts int) {
	if vars[OrderVar] == "" {
		vars[OrderVar] = bootctl.DefaultOrder
	}
	for _, s := range ota.Slots() {
		if vars[LeftVar(s)] == "" {
			vars[LeftVar(s)] = strconv.Itoa(attempts)
		}
	}
}

// Pick is the decision logic of the shipped U-Boot boot script
// (packaging/bootloader/boot.cmd), written once so the sim backend and the script
// cannot drift apart (a test runs the script itself against this function).
//
// Walking BOOT_ORDER, the first slot with BOOT_x_LEFT > 0 is decremented and booted.
// When none is left, both counters are reset to attempts, the env is saved and the
// board resets; the next run of the script then picks again from the reset counters,
// which is what is returned here. newVars is the environment as saved by the boot
// (a copy; vars is not modified). slot is "" only when BOOT_ORDER names no slot at
// all, where U-Boot would reset forever.
func Pick(vars map[string]string, attempts int) (slot ota.Slot, newVars map[string]string) {
	nv := maps.Clone(vars)
	if nv == nil {
		nv = map[string]string{}
	}
	defaults(nv, attempts)
	for pass := 0; pass < 2; pass++ {
		for _, f := range strings.Fields(nv[OrderVar]) {
			w := ota.Slot(f)
			if !w.Valid() {
				continue
			}
			k := LeftVar(w)
			if testInt(nv[k]) > 0 {
				nv[k] = setexprDec(nv[k])
				return w, nv
			}
		}
		// "No valid slot found": reset both, saveenv, reset the board.
		for _, s := range ota.Slots() {
			nv[LeftVar(s)] = strconv.Itoa(attempts)
		}
	}
	return "", nv
}

// StateOf reads the U-Boot variables as the boot script will see them.
func StateOf(vars map[string]string, attempts int) bootctl.State {
	v := maps.Clone(vars)
	if v == nil {
		v = map[string]string{}
	}
	defaults(v, attempts)
	st := bootctl.State{Order: orderSlots(v[OrderVar]), Slots: map[ota.Slot]bootctl.SlotState{}}
	for _, s := range ota.Slots() {
		left := testInt(v[LeftVar(s)])
		st.Slots[s] = bootctl.SlotState{Bootable: left > 0, AttemptsLeft: int(left)}
	}
	return st
}

// SetBad sets BOOT_x_LEFT=0 in vars (SPEC §7).
func SetBad(vars map[string]string, slot ota.Slot) error {
	if err := bootctl.CheckSlot(slot); err != nil {
		return err
	}
	vars[LeftVar(slot)] = "0"
	return nil
}

// SetActive puts slot first in BOOT_ORDER and sets BOOT_x_LEFT=attempts.
func SetActive(vars map[string]string, slot ota.Slot, attempts int) error {
	if err := bootctl.CheckSlot(slot); err != nil {
		return err
	}
	vars[OrderVar] = string(slot) + " " + string(slot.Other())
	vars[LeftVar(slot)] = strconv.Itoa(attempts)
	return nil
}

// SetGood sets BOOT_x_LEFT=attempts.
func SetGood(vars map[string]string, slot ota.Slot, attempts int) error {
	if err := bootctl.CheckSlot(slot); err != nil {
		return err
	}
	vars[LeftVar(slot)] = strconv.Itoa(attempts)
	return nil
}
