package node

import (
	"runtime/debug"
	"time"
)

// BuildTime is the commit time otad was built from (the vcs.time the Go
// toolchain stamps into binaries built in a checkout), or zero when unknown.
// It is the lowest the checks' clock floor goes (docs/contract/checks.md): a device that
// boots at 1970 still knows its software is newer than that.
func BuildTime() time.Time {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return time.Time{}
	}
	for _, s := range info.Settings {
		if s.Key == "vcs.time" {
			if t, err := time.Parse(time.RFC3339, s.Value); err == nil {
				return t.UTC()
			}
		}
	}
	return time.Time{}
}
