package slots

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// mountedAt returns a mount point of the block device rdev, or of one of its
// partitions, from a mountinfo file; "" when none is mounted.
func mountedAt(mountinfo string, rdev uint64) (string, error) {
	devs := map[string]bool{devString(rdev): true}
	// Partitions of a whole disk live in sysfs under the disk's directory.
	sysDir := filepath.Join("/sys/dev/block", devString(rdev))
	if entries, err := os.ReadDir(sysDir); err == nil {
		for _, e := range entries {
			if b, err := os.ReadFile(filepath.Join(sysDir, e.Name(), "dev")); err == nil {
				devs[strings.TrimSpace(string(b))] = true
			}
		}
	}
	f, err := os.Open(mountinfo)
	if err != nil {
		return "", fmt.Errorf("check mounts: %w", err)
	}
	defer f.Close()
	mp, err := findMount(f, devs)
	if err != nil {
		return "", fmt.Errorf("check mounts in %s: %w", mountinfo, err)
	}
	return mp, nil
}

// findMount scans mountinfo lines ("36 35 98:0 /root /mnt rw - ext4 ...")
// for a mount of one of devs ("major:minor").
func findMount(r io.Reader, devs map[string]bool) (string, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		if devs[fields[2]] {
			return fields[2] + " on " + unescapeMount(fields[4]), nil
		}
	}
	return "", sc.Err()
}

// unescapeMount undoes the octal escapes (\040 for space) of mountinfo paths.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func devString(rdev uint64) string {
	return fmt.Sprintf("%d:%d", unix.Major(rdev), unix.Minor(rdev))
}
