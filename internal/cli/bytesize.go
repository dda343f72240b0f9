package cli

// Byte counts given on command lines: "4096", "512KiB", "4MiB", "1GiB". Only
// binary units: "MB" is refused rather than guessed.

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxBytes is the largest count accepted (1 TiB): more is a typo, not a size.
const MaxBytes = 1 << 40

// ParseBytes reads a non-negative byte count.
func ParseBytes(s string) (int64, error) {
	num, mult := strings.TrimSpace(s), int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}} {
		if v, ok := strings.CutSuffix(num, u.suffix); ok {
			num, mult = strings.TrimSpace(v), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q: want a byte count like 4096, 512KiB, 4MiB or 1GiB", s)
	}
	if n > MaxBytes/mult {
		return 0, fmt.Errorf("%q: more than 1 TiB", s)
	}
	return n * mult, nil
}
