package agent

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// RunTime is how long the new slot has run while confirming, on the boot
// clock (docs/contract/installing.md, "The commit window"): Ran in earlier
// boots, and in boot Boot from From to Seen. The wall clock plays no part:
// boards without a battery-backed RTC boot at their build time and jump by
// months when NTP or a GNSS fix arrives, and a window counted on it would
// end at once (or never).
type RunTime struct {
	Boot string        `json:"boot_id"`
	From time.Duration `json:"from_ns"`
	Seen time.Duration `json:"seen_ns"`
	Ran  time.Duration `json:"ran_ns"`
}

// Used is the running time counted so far.
func (r RunTime) Used() time.Duration { return r.Ran + max(0, r.Seen-r.From) }

// At is r seen at uptime in boot: in a new boot what the last one ran
// (up to its last journaled sighting) moves into Ran and the count goes on
// from uptime. The boot clock never goes back within a boot; a reading
// below the last one is taken as no time.
func (r RunTime) At(boot string, uptime time.Duration) RunTime {
	if boot != r.Boot {
		return RunTime{Boot: boot, From: uptime, Seen: uptime, Ran: r.Used()}
	}
	r.Seen = max(r.Seen, uptime)
	return r
}

// Uptime is the device's running time in this boot: the commit window
// counts on it. SystemUptime is the real one; tests pin it.
type Uptime interface{ Uptime() time.Duration }

// SystemUptime reads CLOCK_BOOTTIME: it starts at the boot, counts time
// suspended too, and no one sets it.
type SystemUptime struct{}

// Uptime is CLOCK_BOOTTIME; should the call fail (it does not on Linux),
// zero, which the count takes as no time run.
func (SystemUptime) Uptime() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// windowEnded is the health verdict of a commit window used up.
func windowEnded(window, used time.Duration, since time.Time) EvHealth {
	return EvHealth{Message: fmt.Sprintf("the commit window of %s ended after %s of running time on the new slot (first started %s by the wall clock) before the health check passed",
		window, used.Round(time.Second), since.UTC().Format(time.RFC3339))}
}
