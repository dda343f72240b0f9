package uboot

import (
	"fmt"
	"maps"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/otad/otad/ota"
)

// U-Boot's number parsing, as seen on Debian's u-boot-qemu 2023.01 (docs/e2e.md, the
// e2e suite): `test 0x10 -eq 16` and `test 010 -eq 8` are true, `test a -gt 0`
// is false; setexpr reads hex with or without 0x.
func TestUBootStrtoul(t *testing.T) {
	tests := []struct {
		s    string
		base uint64
		want uint64
	}{
		{"0x10", 0, 16}, {"010", 0, 8}, {"10", 0, 10}, {"a", 0, 0}, {"0xa", 0, 10}, {"0XfF", 0, 255},
		{"0x", 0, 0}, {"", 0, 0}, {"09", 0, 0}, {"12abc", 0, 12}, {"-1", 0, 0},
		{"a", 16, 10}, {"0x10", 16, 16}, {"10", 16, 16}, {"0x0x3", 16, 0}, {"g", 16, 0},
		{"0x10", 10, 16}, // a 0x prefix is hex whatever the base (lib/strto.c)
	}
	for _, tc := range tests {
		if got := strtoul(tc.s, tc.base); got != tc.want {
			t.Errorf("strtoul(%q, %d) = %d, want %d", tc.s, tc.base, got, tc.want)
		}
	}
}

// The counters as `test 0x${BOOT_x_LEFT} -gt 0` sees them, and setexpr's count down.
func TestCounters(t *testing.T) {
	tests := []struct {
		v        string
		left     int64
		decrease string
	}{
		{"3", 3, "2"}, {"a", 10, "9"}, {"10", 16, "f"}, {"A", 10, "9"}, {"ff", 255, "fe"},
		{"0", 0, ""}, {"", 0, ""}, {"x", 0, ""}, {"-1", 0, ""}, {"0x3", 0, ""},
		{"ffffffffffffffff", -1, ""}, // a C long: not above 0
	}
	for _, tc := range tests {
		if got := left(tc.v); got != tc.left {
			t.Errorf("left(%q) = %d, want %d", tc.v, got, tc.left)
		}
		if tc.decrease != "" && setexprDec(tc.v) != tc.decrease {
			t.Errorf("setexpr %q - 1 = %q, want %q", tc.v, setexprDec(tc.v), tc.decrease)
		}
	}
	for n, want := range map[int]string{1: "1", 3: "3", 9: "9", 10: "a", 16: "10", 255: "ff"} {
		if got := Counter(n); got != want {
			t.Errorf("Counter(%d) = %q, want %q (RAUC's %%x)", n, got, want)
		}
	}
	for _, tc := range []struct {
		n  int
		ok bool
	}{{0, false}, {-1, false}, {1, true}, {9, true}, {10, true}, {255, true}, {MaxAttempts, true}, {MaxAttempts + 1, false}} {
		if err := CheckAttempts(tc.n); (err == nil) != tc.ok {
			t.Errorf("CheckAttempts(%d) = %v, want ok %v", tc.n, err, tc.ok)
		}
	}
}

// The shell translation of the boot script reads numbers with __ustrtol; it
// must agree with the Go mirror of U-Boot, or the script test proves nothing.
func TestShStrtolMatchesGo(t *testing.T) {
	inputs := []string{"0x10", "010", "10", "a", "0xa", "0XfF", "0x", "", "09", "12abc", "-1", "-0x3", "0x0x3", "g", "ff"}
	var script strings.Builder
	script.WriteString(ubootShPrelude)
	for _, s := range inputs {
		fmt.Fprintf(&script, "__ustrtol %q; __ustrtol %q 16\n", s, s)
	}
	out, err := exec.Command("/bin/sh", "-c", script.String()).Output()
	if err != nil {
		t.Fatalf("sh: %v", err)
	}
	lines := strings.Fields(string(out))
	if len(lines) != 2*len(inputs) {
		t.Fatalf("sh printed %q", out)
	}
	for i, s := range inputs {
		// U-Boot's simple_strtol: a leading '-' negates simple_strtoul of the rest.
		digits, sign := strings.CutPrefix(s, "-")
		for j, base := range []uint64{0, 16} {
			want := int64(strtoul(digits, base))
			if sign {
				want = -want
			}
			if got, _ := strconv.ParseInt(lines[2*i+j], 10, 64); got != want {
				t.Errorf("__ustrtol %q %d = %s, Go %d", s, base, lines[2*i+j], want)
			}
		}
	}
}

// The marks as RAUC's uboot backend makes them (src/bootloaders/uboot.c).
func TestUBootMarks(t *testing.T) {
	tests := []struct {
		name  string
		vars  map[string]string
		mark  string
		slot  ota.Slot
		order string // "-" for unset
		left  string
	}{
		{"bad takes the slot out", map[string]string{"BOOT_ORDER": "A B"}, "bad", "B", "A", "0"},
		{"bad of the first", map[string]string{"BOOT_ORDER": "B A"}, "bad", "B", "A", "0"},
		{"bad with the order unset: out of the script's default", map[string]string{}, "bad", "A", "B", "0"},
		{"bad keeps other names", map[string]string{"BOOT_ORDER": "R B  A"}, "bad", "B", "R A", "0"},
		{"bad of the last slot deletes the order", map[string]string{"BOOT_ORDER": "A"}, "bad", "A", "-", "0"},
		{"bad twice", map[string]string{"BOOT_ORDER": "A"}, "bad", "B", "A", "0"},
		{"active after bad", map[string]string{"BOOT_ORDER": "A"}, "active", "B", "B A", "3"},
		{"active keeps the rest as it was", map[string]string{"BOOT_ORDER": "A B"}, "active", "B", "B A", "3"},
		{"active does not bring back a removed slot", map[string]string{"BOOT_ORDER": "B"}, "active", "B", "B", "3"},
		{"active with the order unset", map[string]string{}, "active", "B", "B A", "3"},
		{"good leaves the order", map[string]string{"BOOT_ORDER": "A", "BOOT_B_LEFT": "0"}, "good", "B", "A", "3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := maps.Clone(tc.vars)
			var err error
			switch tc.mark {
			case "bad":
				err = SetBad(v, tc.slot)
			case "active":
				err = SetActive(v, tc.slot, 3)
			case "good":
				err = SetGood(v, tc.slot, 3)
			}
			if err != nil {
				t.Fatal(err)
			}
			order, ok := v[OrderVar]
			if !ok {
				order = "-"
			}
			if order != tc.order || v[LeftVar(tc.slot)] != tc.left {
				t.Errorf("BOOT_ORDER %q BOOT_%s_LEFT %q, want %q %q", order, tc.slot, v[LeftVar(tc.slot)], tc.order, tc.left)
			}
			if tc.mark == "bad" {
				if st := StateOf(v, 3); st.Slots[tc.slot].Bootable {
					t.Errorf("slot %s still bootable after mark bad: %+v", tc.slot, st)
				}
			}
		})
	}
	if err := SetBad(map[string]string{}, "C"); err == nil {
		t.Error("mark bad of slot C: no error")
	}
}

// A slot out of BOOT_ORDER is not bootable, whatever its counter (RAUC's
// get_state: good = in BOOT_ORDER and attempts left).
func TestUBootStateOrder(t *testing.T) {
	st := StateOf(map[string]string{"BOOT_ORDER": "A", "BOOT_A_LEFT": "a", "BOOT_B_LEFT": "3"}, 3)
	if !st.Slots["A"].Bootable || st.Slots["A"].AttemptsLeft != 10 || st.Slots["B"].Bootable || st.Primary() != "A" {
		t.Fatalf("state %+v", st)
	}
}
