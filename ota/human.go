package ota

import (
	"fmt"
	"io"
	"os"
)

// How byte counts and rates read on a terminal, the same on the device
// (`otad install`'s progress) and on the operator's side (`otactl status`,
// `otactl sign`): here so that neither binary links the other's code
// (deps_test.go).

// HumanSize is a byte count as people read it: "3.0 GiB", "512 B".
func HumanSize(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	f, i := float64(n), 0
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.1f %s", f, units[i])
}

// HumanRate shows bytes per second as "12.3 MiB/s".
func HumanRate(r float64) string {
	units := []string{"B/s", "KiB/s", "MiB/s", "GiB/s"}
	i := 0
	for r >= 1024 && i < len(units)-1 {
		r /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %s", r, units[i])
}

// IsTerminal reports whether w is a terminal, where a progress line or a
// table is redrawn in place rather than printed again.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
