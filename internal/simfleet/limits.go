package simfleet

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// RaiseNoFile raises this process's soft RLIMIT_NOFILE to its hard limit:
// every device holds an MQTT connection, so a fleet of thousands needs
// more descriptors than the usual soft limit of 1024. It returns the soft
// limit before and after.
func RaiseNoFile() (was, now uint64, err error) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return 0, 0, fmt.Errorf("getrlimit NOFILE: %w", err)
	}
	was = lim.Cur
	if lim.Cur >= lim.Max {
		return was, lim.Cur, nil
	}
	lim.Cur = lim.Max
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return was, was, fmt.Errorf("setrlimit NOFILE %d: %w", lim.Cur, err)
	}
	return was, lim.Cur, nil
}
