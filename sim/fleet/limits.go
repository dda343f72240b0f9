package fleet

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// RaiseNoFile raises this process's soft RLIMIT_NOFILE to its hard limit:
// every device holds an MQTT connection, so a fleet of thousands needs
// more descriptors than the usual soft limit of 1024. It returns the soft
// limit before and after. Go's runtime already raises the soft limit at
// start but gives child processes the original one back; setting it here
// also hands the raised limit to children (a broker the bench starts).
func RaiseNoFile() (was, now uint64, err error) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return 0, 0, fmt.Errorf("getrlimit NOFILE: %w", err)
	}
	was = lim.Cur
	lim.Cur = lim.Max
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return was, was, fmt.Errorf("setrlimit NOFILE %d: %w", lim.Cur, err)
	}
	return was, lim.Cur, nil
}
