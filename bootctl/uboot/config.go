package uboot

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Copy is one copy of the environment: where it lives, one line of fw_env.config.
type Copy struct {
	Path       string // device node or file
	Offset     int64  // bytes; negative counts back from the end of the device
	Size       int64  // env size in bytes (the same for both copies)
	SectorSize int64  // erase sector size (0: not given); only used by MTD flash
	Sectors    int64  // number of sectors (0: not given); only used by MTD flash
}

// MaxEnvSize bounds CONFIG_ENV_SIZE: boards use 8 KiB to 1 MiB.
const MaxEnvSize = 4 << 20

// ParseConfig reads an /etc/fw_env.config-style file the way libubootenv does
// (sscanf "%s %lli %zx %zx %lx"): lines starting with '#' and lines with fewer than
// three fields are skipped; the offset is C integer syntax (0x.. hex, 0.. octal,
// decimal, may be negative); size, sector size and sector count are hex with or
// without 0x. The first two device lines are used: one line is a single env, two
// lines a redundant pair. name is used in error messages.
func ParseConfig(name string, data []byte) ([]Copy, error) {
	var devs []Copy
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan() && len(devs) < 2; n++ {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		d := Copy{}
		got := 0 // fields converted, like sscanf's return value
		if len(f) > 0 {
			d.Path = f[0]
			got = 1
		}
		if got == 1 && len(f) > 1 {
			// Go's base 0 also takes 0b, 0o and '_', which C's strtoll does not.
			if v, err := strconv.ParseInt(f[1], 0, 64); err == nil && !strings.ContainsAny(f[1], "_oObB") {
				d.Offset, got = v, 2
			}
		}
		hexField := func(i int, dst *int64) {
			if got == i && len(f) > i {
				if v, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimPrefix(f[i], "0x"), "0X"), 16, 63); err == nil {
					*dst, got = int64(v), i+1
				}
			}
		}
		hexField(2, &d.Size)
		hexField(3, &d.SectorSize)
		hexField(4, &d.Sectors)
		if got < 3 {
			continue
		}
		if d.Size == 0 {
			return nil, fmt.Errorf("%s:%d: env size is 0", name, n)
		}
		if d.Size > MaxEnvSize {
			// The env is read whole: a size like this would take the daemon's memory.
			return nil, fmt.Errorf("%s:%d: env size 0x%x is over the %d MiB a U-Boot env can be (sizes here are hex)", name, n, d.Size, MaxEnvSize>>20)
		}
		if err := checkDevicePath(d.Path); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, n, err)
		}
		devs = append(devs, d)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	switch {
	case len(devs) == 0:
		return nil, fmt.Errorf("%s: no environment device line (want \"DEVICE OFFSET SIZE\")", name)
	case len(devs) == 2 && devs[0].Size != devs[1].Size:
		return nil, fmt.Errorf("%s: the two copies differ in size (0x%x, 0x%x)", name, devs[0].Size, devs[1].Size)
	}
	if devs[0].Size <= headerSize(len(devs) == 2) {
		return nil, fmt.Errorf("%s: env size 0x%x is smaller than its header", name, devs[0].Size)
	}
	return devs, nil
}

// checkDevicePath refuses what only libubootenv's C code can drive: raw MTD
// flash needs erase/lock ioctls and UBI volumes their own API. eMMC, block
// devices and files are written with plain pwrite.
func checkDevicePath(p string) error {
	base := filepath.Base(p)
	if strings.HasPrefix(p, "/dev/") && (strings.HasPrefix(base, "mtd") || strings.HasPrefix(base, "ubi")) {
		return fmt.Errorf("device %s: MTD/UBI environments are not supported (use a file, eMMC or block device)", p)
	}
	return nil
}

// LoadConfig reads and parses a fw_env.config file.
func LoadConfig(path string) ([]Copy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("uboot env config: %w", err)
	}
	return ParseConfig(path, data)
}
