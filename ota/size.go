package ota

import "fmt"

// Size is a byte count as people read it: "80.0 MiB (83886080 bytes)",
// exact bytes kept beside the unit so nothing is lost in the rounding.
func Size(n int64) string {
	const unit = 1024
	if n < unit && n > -unit {
		return fmt.Sprintf("%d bytes", n)
	}
	f, u := float64(n), "KiB"
	for _, next := range []string{"MiB", "GiB", "TiB"} {
		if f/unit < unit && f/unit > -unit {
			break
		}
		f, u = f/unit, next
	}
	return fmt.Sprintf("%.1f %s (%d bytes)", f/unit, u, n)
}
