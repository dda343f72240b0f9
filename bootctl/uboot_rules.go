package bootctl

import (
	"fmt"
	"maps"
	"strconv"
	"strings"

	"github.com/otad/otad/ota"
)

// U-Boot variable names (RAUC-compatible, SPEC §7). The sim backend uses the same.
const (
	UBootOrderVar = "BOOT_ORDER"
	// DefaultOrder is what the boot script assumes when BOOT_ORDER is unset.
	DefaultOrder = "A B"
)

// UBootLeftVar is the name of slot's attempt counter, e.g. "BOOT_A_LEFT".
func UBootLeftVar(slot ota.Slot) string { return "BOOT_" + string(slot) + "_LEFT" }

// MaxUBootAttempts bounds the configured attempts: U-Boot's setexpr counts in hex
// while its test -gt compares in decimal, and the two agree only on one digit.
const MaxUBootAttempts = 9

// CheckUBootAttempts validates a configured attempt count for the U-Boot scheme.
func CheckUBootAttempts(attempts int) error {
	if attempts < 1 || attempts > MaxUBootAttempts {
		return fmt.Errorf("attempts %d: must be 1..%d (U-Boot's setexpr counts in hex, test -gt in decimal)", attempts, MaxUBootAttempts)
	}
	return nil
}

// ubootTestInt mirrors U-Boot's `test A -gt B`, which reads its operands with
// simple_strtol(s, NULL, 10): an optional '-', then leading decimal digits; anything
// else reads as 0.
func ubootTestInt(s string) int64 {
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

// ubootSetexprDec mirrors `setexpr X ${X} - 1`: U-Boot parses setexpr operands with
// simple_strtoul(s, NULL, 16) (optional 0x) and prints the result with %lx.
func ubootSetexprDec(s string) string {
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

// ubootDefaults applies the boot script's first three lines: unset (or empty)
// variables get their defaults.
func ubootDefaults(vars map[string]string, attempts int) {
	if vars[UBootOrderVar] == "" {
		vars[UBootOrderVar] = DefaultOrder
	}
	for _, s := range ota.Slots() {
		if vars[UBootLeftVar(s)] == "" {
			vars[UBootLeftVar(s)] = strconv.Itoa(attempts)
		}
	}
}

// UBootPick is the decision logic of the shipped U-Boot boot script
// (packaging/bootloader/boot.cmd), written once so the sim backend and the script
// cannot drift apart (a test runs the script itself against this function).
//
// Walking BOOT_ORDER, the first slot with BOOT_x_LEFT > 0 is decremented and booted.
// When none is left, both counters are reset to attempts, the env is saved and the
// board resets; the next run of the script then picks again from the reset counters,
// which is what is returned here. newVars is the environment as saved by the boot
// (a copy; vars is not modified). slot is "" only when BOOT_ORDER names no slot at
// all, where U-Boot would reset forever.
func UBootPick(vars map[string]string, attempts int) (slot ota.Slot, newVars map[string]string) {
	nv := maps.Clone(vars)
	if nv == nil {
		nv = map[string]string{}
	}
	ubootDefaults(nv, attempts)
	for pass := 0; pass < 2; pass++ {
		for _, f := range strings.Fields(nv[UBootOrderVar]) {
			w := ota.Slot(f)
			if !w.Valid() {
				continue
			}
			k := UBootLeftVar(w)
			if ubootTestInt(nv[k]) > 0 {
				nv[k] = ubootSetexprDec(nv[k])
				return w, nv
			}
		}
		// "No valid slot found": reset both, saveenv, reset the board.
		for _, s := range ota.Slots() {
			nv[UBootLeftVar(s)] = strconv.Itoa(attempts)
		}
	}
	return "", nv
}

// UBootState reads the U-Boot variables as the boot script will see them.
func UBootState(vars map[string]string, attempts int) State {
	v := maps.Clone(vars)
	if v == nil {
		v = map[string]string{}
	}
	ubootDefaults(v, attempts)
	st := State{Order: orderSlots(v[UBootOrderVar]), Slots: map[ota.Slot]SlotState{}}
	for _, s := range ota.Slots() {
		left := ubootTestInt(v[UBootLeftVar(s)])
		st.Slots[s] = SlotState{Bootable: left > 0, AttemptsLeft: int(left)}
	}
	return st
}

// UBootMarkBad sets BOOT_x_LEFT=0 in vars (SPEC §7).
func UBootMarkBad(vars map[string]string, slot ota.Slot) error {
	if err := CheckSlot(slot); err != nil {
		return err
	}
	vars[UBootLeftVar(slot)] = "0"
	return nil
}

// UBootMarkActive puts slot first in BOOT_ORDER and sets BOOT_x_LEFT=attempts.
func UBootMarkActive(vars map[string]string, slot ota.Slot, attempts int) error {
	if err := CheckSlot(slot); err != nil {
		return err
	}
	vars[UBootOrderVar] = string(slot) + " " + string(slot.Other())
	vars[UBootLeftVar(slot)] = strconv.Itoa(attempts)
	return nil
}

// UBootMarkGood sets BOOT_x_LEFT=attempts.
func UBootMarkGood(vars map[string]string, slot ota.Slot, attempts int) error {
	if err := CheckSlot(slot); err != nil {
		return err
	}
	vars[UBootLeftVar(slot)] = strconv.Itoa(attempts)
	return nil
}
