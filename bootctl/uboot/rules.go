package uboot

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/otad/otad/bootctl"
	"github.com/otad/otad/ota"
)

// OrderVar is the U-Boot boot order variable (RAUC-compatible, docs/contract/bootloaders.md). The
// sim backend uses the same variables.
const OrderVar = "BOOT_ORDER"

// LeftVar is the name of slot's attempt counter, e.g. "BOOT_A_LEFT".
func LeftVar(slot ota.Slot) string { return "BOOT_" + string(slot) + "_LEFT" }

// MaxAttempts bounds the configured attempts as RAUC does (a non-negative int;
// otad's 0 means the default, 3). The counters are hex both ways: RAUC and otad
// write them with %x, and the boot scripts read them with
// `test 0x${BOOT_x_LEFT} -gt 0` and `setexpr BOOT_x_LEFT ${BOOT_x_LEFT} - 1`.
const MaxAttempts = math.MaxInt32

// CheckAttempts validates a configured attempt count for the U-Boot scheme.
func CheckAttempts(attempts int) error {
	if attempts < 1 || attempts > MaxAttempts {
		return fmt.Errorf("attempts %d: must be 1..%d (as RAUC's boot-attempts)", attempts, MaxAttempts)
	}
	return nil
}

// Counter is how a counter is written into BOOT_x_LEFT: hex without a prefix,
// as RAUC's %x ("a" for 10).
func Counter(n int) string { return strconv.FormatInt(int64(n), 16) }

// strtoul mirrors U-Boot's simple_strtoul (lib/strto.c, 2023.01): a 0x prefix
// means hex whatever base says; otherwise base 0 picks octal for a leading 0
// and decimal else; digits are read until one does not fit the base.
func strtoul(s string, base uint64) uint64 {
	if len(s) >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') {
		base, s = 16, s[2:]
	} else if base == 0 {
		base = 10
		if strings.HasPrefix(s, "0") {
			base = 8
		}
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		d, ok := hexDigit(s[i])
		if !ok || uint64(d) >= base {
			break
		}
		n = n*base + uint64(d) // wraps like the C unsigned long on junk
	}
	return n
}

// left is what the boot scripts' `test 0x${BOOT_x_LEFT} -gt 0` compares:
// U-Boot's test reads numbers with simple_strtol(s, NULL, 0), so the value's
// leading hex digits, as a 64-bit long ("0x3" reads as 0: "0x0x3").
func left(v string) int64 { return int64(strtoul("0x"+v, 0)) }

// setexprDec mirrors `setexpr X ${X} - 1`: U-Boot parses setexpr operands with
// simple_strtoul(s, NULL, 16) (optional 0x) and prints the result with %lx.
func setexprDec(s string) string { return strconv.FormatUint(strtoul(s, 16)-1, 16) }

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

// defaults applies the boot script's first three lines: unset (or empty)
// variables get their defaults.
func defaults(vars map[string]string, attempts int) {
	if vars[OrderVar] == "" {
		vars[OrderVar] = bootctl.DefaultOrder
	}
	for _, s := range ota.Slots() {
		if vars[LeftVar(s)] == "" {
			vars[LeftVar(s)] = Counter(attempts)
		}
	}
}

// Pick is the decision logic of the shipped U-Boot boot script
// (packaging/bootloader/boot.cmd), written once so the sim backend and the script
// cannot drift apart (a test runs the script itself against this function).
//
// Walking BOOT_ORDER, the first slot with BOOT_x_LEFT > 0 (hex) is decremented and
// booted; a slot not in BOOT_ORDER never is. When none is left, both counters are
// reset to attempts, the env is saved and the board resets; the next run of the
// script then picks again from the reset counters, which is what is returned here.
// newVars is the environment as saved by the boot (a copy; vars is not modified).
// slot is "" only when BOOT_ORDER names no slot at all, where U-Boot would reset
// forever.
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
			if left(nv[k]) > 0 {
				nv[k] = setexprDec(nv[k])
				return w, nv
			}
		}
		// "No valid slot found": reset both, saveenv, reset the board.
		for _, s := range ota.Slots() {
			nv[LeftVar(s)] = Counter(attempts)
		}
	}
	return "", nv
}

// StateOf reads the U-Boot variables as the boot script will see them: a slot
// is bootable when it is in BOOT_ORDER with attempts left (RAUC's "good").
func StateOf(vars map[string]string, attempts int) bootctl.State {
	v := maps.Clone(vars)
	if v == nil {
		v = map[string]string{}
	}
	defaults(v, attempts)
	st := bootctl.State{Order: bootctl.OrderSlots(v[OrderVar]), Slots: map[ota.Slot]bootctl.BootEntry{}}
	for _, s := range ota.Slots() {
		n := left(v[LeftVar(s)])
		st.Slots[s] = bootctl.BootEntry{Bootable: n > 0 && slices.Contains(st.Order, s), AttemptsLeft: int(min(max(n, 0), math.MaxInt32))}
	}
	return st
}

// SetBad sets BOOT_x_LEFT=0 and takes x out of BOOT_ORDER, as RAUC does, so the
// boot script never picks the slot again, not even after resetting the counters
// when no slot has attempts left; only mark active brings it back. With no slot
// left in the order BOOT_ORDER is deleted (fw_setenv's empty value), and the
// script falls back to its default "A B".
func SetBad(vars map[string]string, slot ota.Slot) error {
	if err := bootctl.CheckSlot(slot); err != nil {
		return err
	}
	if rest := bootctl.OrderWithout(vars[OrderVar], slot); len(rest) > 0 {
		vars[OrderVar] = strings.Join(rest, " ")
	} else {
		delete(vars, OrderVar)
	}
	vars[LeftVar(slot)] = "0"
	return nil
}

// SetActive puts slot first in BOOT_ORDER, before the rest of the order as it
// was (RAUC's set_primary), and sets BOOT_x_LEFT=attempts.
func SetActive(vars map[string]string, slot ota.Slot, attempts int) error {
	if err := bootctl.CheckSlot(slot); err != nil {
		return err
	}
	vars[OrderVar] = strings.Join(append([]string{string(slot)}, bootctl.OrderWithout(vars[OrderVar], slot)...), " ")
	vars[LeftVar(slot)] = Counter(attempts)
	return nil
}

// SetGood sets BOOT_x_LEFT=attempts; BOOT_ORDER stays as it is (RAUC).
func SetGood(vars map[string]string, slot ota.Slot, attempts int) error {
	if err := bootctl.CheckSlot(slot); err != nil {
		return err
	}
	vars[LeftVar(slot)] = Counter(attempts)
	return nil
}
