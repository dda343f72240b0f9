package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// fdsPerDevice is a generous count of what one simulated device holds open:
// its MQTT connection, inotify watch, log file, HTTP connection, slot files
// and boot env, plus mosquitto's end of the connection (mosquitto inherits
// this process's limit).
const fdsPerDevice = 16

// raiseNoFile lifts RLIMIT_NOFILE for n devices, as far as it may go: past
// the hard limit only as root, and never past fs.nr_open. It returns the
// soft limit in force afterwards. Go's runtime already raises the soft limit
// to the hard one; calling Setrlimit ourselves also makes mosquitto, our
// child, inherit the raised limit.
func raiseNoFile(n int) (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("getrlimit NOFILE: %w", err)
	}
	want := uint64(n*fdsPerDevice + 1024)
	if want <= lim.Cur {
		return lim.Cur, nil
	}
	if want > lim.Max {
		if os.Geteuid() != 0 {
			want = lim.Max
		} else if nr, err := readProcInt("/proc/sys/fs/nr_open"); err == nil && want > uint64(nr) {
			want = uint64(nr)
		}
	}
	next := syscall.Rlimit{Cur: want, Max: max(want, lim.Max)}
	err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &next)
	if errors.Is(err, syscall.EPERM) && want > lim.Max {
		// Root without CAP_SYS_RESOURCE (a container): the hard limit is it.
		// The largest sizes may then run out of descriptors, which is a
		// finding, so go on.
		next = syscall.Rlimit{Cur: lim.Max, Max: lim.Max}
		err = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &next)
	}
	if err != nil {
		return lim.Cur, fmt.Errorf("setrlimit NOFILE %d: %w", next.Cur, err)
	}
	return next.Cur, nil
}

const inotifyInstances = "/proc/sys/fs/inotify/max_user_instances"

// raiseInotify makes room for n more inotify instances (every agent watches
// its trust directory with one) when the per-user limit would not allow
// them; it returns a restore func and what it did, for the report. Only root
// may, and it changes a machine-wide setting for the run: see -raise-inotify.
func raiseInotify(n int) (restore func(), note string, err error) {
	restore = func() {}
	cur, err := readProcInt(inotifyInstances)
	if err != nil {
		return restore, "", err
	}
	want := n + 64 // headroom for this user's other processes
	if want <= cur {
		return restore, fmt.Sprintf("fs.inotify.max_user_instances %d (enough)", cur), nil
	}
	if os.Geteuid() != 0 {
		return restore, "", fmt.Errorf("%s is %d, %d agents need about %d: raise it (as root: sysctl fs.inotify.max_user_instances=%d)", inotifyInstances, cur, n, want, want)
	}
	if err := os.WriteFile(inotifyInstances, []byte(strconv.Itoa(want)), 0o644); err != nil {
		return restore, "", fmt.Errorf("%s: %w", inotifyInstances, err)
	}
	restore = func() { _ = os.WriteFile(inotifyInstances, []byte(strconv.Itoa(cur)), 0o644) }
	return restore, fmt.Sprintf("fs.inotify.max_user_instances raised from %d to %d for the run (restored at exit)", cur, want), nil
}

func readProcInt(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}
