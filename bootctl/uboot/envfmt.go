package uboot

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
	"strings"

	"github.com/otad/otad/bootctl"
)

// headerSize is the CRC32, plus the flags byte of a redundant copy.
func headerSize(redundant bool) int64 {
	if redundant {
		return 5
	}
	return 4
}

// ParseEnv decodes one copy of a U-Boot environment: a little-endian CRC32 of the
// data area, a flags byte when redundant, then NUL-terminated "name=value" strings
// ended by an empty string. Like libubootenv, entries without '=' or with an empty
// name are skipped and a later duplicate wins. A CRC mismatch or a data area
// without its terminator is an error wrapping bootctl.ErrBadEnv.
func ParseEnv(buf []byte, redundant bool) (vars map[string]string, flags byte, err error) {
	hdr := int(headerSize(redundant))
	if len(buf) <= hdr {
		return nil, 0, fmt.Errorf("%w: %d bytes is too short for an environment", bootctl.ErrBadEnv, len(buf))
	}
	data := buf[hdr:]
	want := binary.LittleEndian.Uint32(buf[:4])
	if got := crc32.ChecksumIEEE(data); got != want {
		return nil, 0, fmt.Errorf("%w: crc32 mismatch (stored %08x, computed %08x)", bootctl.ErrBadEnv, want, got)
	}
	if redundant {
		flags = buf[4]
	}
	vars = map[string]string{}
	for i := 0; ; {
		if i >= len(data) {
			return nil, 0, fmt.Errorf("%w: data area has no terminating empty entry", bootctl.ErrBadEnv)
		}
		if data[i] == 0 {
			return vars, flags, nil
		}
		end := slices.Index(data[i:], 0)
		if end < 0 {
			return nil, 0, fmt.Errorf("%w: entry at offset %d is not NUL-terminated", bootctl.ErrBadEnv, hdr+i)
		}
		entry := string(data[i : i+end])
		i += end + 1
		name, value, ok := strings.Cut(entry, "=")
		if !ok || name == "" {
			continue
		}
		vars[name] = value
	}
}

// EncodeEnv builds one copy of size bytes: CRC, [flags], the variables sorted by
// name (as U-Boot's saveenv and libubootenv write them), the terminating NUL, then
// zero padding as U-Boot's own saveenv leaves it (mkenvimage pads with 0xff,
// libubootenv with whatever its buffer held; the CRC covers the padding either way).
func EncodeEnv(vars map[string]string, size int, redundant bool, flags byte) ([]byte, error) {
	hdr := int(headerSize(redundant))
	if size <= hdr {
		return nil, fmt.Errorf("env size %d is smaller than its header", size)
	}
	names := make([]string, 0, len(vars))
	need := 1 // final empty entry
	for k, v := range vars {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return nil, fmt.Errorf("variable name %q: must be non-empty without '=' or NUL", k)
		}
		if strings.ContainsRune(v, 0) {
			return nil, fmt.Errorf("variable %s: value contains NUL", k)
		}
		names = append(names, k)
		need += len(k) + 1 + len(v) + 1
	}
	if need > size-hdr {
		return nil, fmt.Errorf("variables need %d bytes, the env holds %d", need, size-hdr)
	}
	slices.Sort(names)
	buf := make([]byte, size)
	p := hdr
	for _, k := range names {
		p += copy(buf[p:], k)
		buf[p] = '='
		p++
		p += copy(buf[p:], vars[k])
		p++ // NUL
	}
	if redundant {
		buf[4] = flags
	}
	binary.LittleEndian.PutUint32(buf[:4], crc32.ChecksumIEEE(buf[hdr:]))
	return buf, nil
}

// newerCopy says which of two valid redundant copies is current, as libubootenv
// and U-Boot decide it: the higher flags counter, except that 0 follows 0xff.
func newerCopy(f0, f1 byte) int {
	switch {
	case f0 == 0xff && f1 == 0:
		return 1
	case f1 == 0xff && f0 == 0:
		return 0
	case f1 > f0:
		return 1
	}
	return 0
}
