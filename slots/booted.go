package slots

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/otad/otad/ota"
)

// maxCmdline bounds what ReadBooted reads; the kernel's own limit is a few KiB.
const maxCmdline = 64 << 10

// byTagDir returns the udev directory that resolves a root= tag naming a
// device indirectly.
func byTagDir(tag string) (string, bool) {
	switch strings.ToUpper(tag) {
	case "PARTUUID":
		return "/dev/disk/by-partuuid", true
	case "UUID":
		return "/dev/disk/by-uuid", true
	case "PARTLABEL":
		return "/dev/disk/by-partlabel", true
	case "LABEL":
		return "/dev/disk/by-label", true
	}
	return "", false
}

// BootedFromCmdline returns the booted slot named by a kernel command line:
// `otad.slot=X`, else `rauc.slot=X`, else the slot whose device (from devices,
// slot name → device path) is the `root=` device. Paths match when equal, when
// they resolve to the same file through symlinks (/dev/disk/by-*), or when they
// are the same block device. root=PARTUUID=/UUID=/PARTLABEL=/LABEL= are looked
// up in /dev/disk/by-*; when that link is missing the error says so.
func BootedFromCmdline(cmdline string, devices map[ota.Slot]string) (ota.Slot, error) {
	params := parseCmdline(cmdline)
	for _, key := range []string{"otad.slot", "rauc.slot"} {
		v, ok := params[key]
		if !ok {
			continue
		}
		if s := normalizeSlot(v); s != "" {
			return s, nil
		}
		return "", fmt.Errorf("kernel command line: %s=%q is not a slot name (want %s or %s)", key, v, ota.SlotA, ota.SlotB)
	}
	root, ok := params["root"]
	if !ok || root == "" {
		return "", errors.New("kernel command line: no otad.slot=, rauc.slot= or root= parameter names the booted slot")
	}
	rootPath := root
	if tag, val, found := strings.Cut(root, "="); found {
		dir, known := byTagDir(tag)
		if !known || val == "" {
			return "", fmt.Errorf("kernel command line: root=%q: cannot match this form against the slot devices; set otad.slot= on the kernel command line", root)
		}
		if strings.Contains(val, "/") {
			return "", fmt.Errorf("kernel command line: root=%q: malformed %s", root, tag)
		}
		if strings.EqualFold(tag, "PARTUUID") || strings.EqualFold(tag, "UUID") {
			// udev writes these links in lower case.
			val = strings.ToLower(val)
		}
		rootPath = filepath.Join(dir, val)
		if _, err := os.Stat(rootPath); err != nil {
			return "", fmt.Errorf("kernel command line: root=%q: %s is not there to resolve it (%w); set otad.slot= on the kernel command line", root, rootPath, err)
		}
	}
	names := slices.Sorted(maps.Keys(devices))
	for _, name := range names {
		dev := devices[name]
		if dev == "" || !sameDevice(rootPath, dev) {
			continue
		}
		if s := normalizeSlot(string(name)); s != "" {
			return s, nil
		}
		return "", fmt.Errorf("kernel command line: root=%q matches device %s of %q, which is not a slot name", root, dev, name)
	}
	return "", fmt.Errorf("kernel command line: root=%q matches none of the slot devices %s", root, describeDevices(names, devices))
}

// ReadBooted reads a kernel command line file (normally /proc/cmdline) and
// returns the booted slot; see BootedFromCmdline.
func ReadBooted(cmdlinePath string, devices map[ota.Slot]string) (ota.Slot, error) {
	b, err := readSmall(cmdlinePath, maxCmdline)
	if err != nil {
		return "", fmt.Errorf("read booted slot: %w", err)
	}
	s, err := BootedFromCmdline(string(b), devices)
	if err != nil {
		return "", fmt.Errorf("%s: %w", cmdlinePath, err)
	}
	return s, nil
}

// parseCmdline splits a command line the way the kernel does: whitespace
// separates parameters, double quotes may enclose spaces and are dropped, and
// a later occurrence of a key overrides an earlier one.
func parseCmdline(s string) map[string]string {
	params := make(map[string]string)
	var tok strings.Builder
	inQuote, have := false, false
	flush := func() {
		if have {
			k, v, _ := strings.Cut(tok.String(), "=")
			params[k] = v
		}
		tok.Reset()
		have = false
	}
	for _, r := range s {
		switch {
		case r == '"':
			inQuote = !inQuote
			have = true
		case !inQuote && (r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == 0):
			flush()
		default:
			tok.WriteRune(r)
			have = true
		}
	}
	flush()
	return params
}

func normalizeSlot(v string) ota.Slot {
	if s := ota.Slot(strings.ToUpper(v)); s.Valid() {
		return s
	}
	return ""
}

// sameDevice reports whether two paths name the same device or file.
func sameDevice(a, b string) bool {
	if filepath.Clean(a) == filepath.Clean(b) {
		return true
	}
	ra, errA := filepath.EvalSymlinks(a)
	rb, errB := filepath.EvalSymlinks(b)
	if errA == nil && errB == nil && ra == rb {
		return true
	}
	var sa, sb syscall.Stat_t
	if syscall.Stat(a, &sa) != nil || syscall.Stat(b, &sb) != nil {
		return false
	}
	if sa.Mode&syscall.S_IFMT == syscall.S_IFBLK && sb.Mode&syscall.S_IFMT == syscall.S_IFBLK {
		return sa.Rdev == sb.Rdev
	}
	return sa.Dev == sb.Dev && sa.Ino == sb.Ino
}

func describeDevices(names []ota.Slot, devices map[ota.Slot]string) string {
	if len(names) == 0 {
		return "(none configured)"
	}
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = string(n) + "=" + devices[n]
	}
	return strings.Join(parts, ", ")
}
