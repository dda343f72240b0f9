package grub

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"github.com/otad/otad/bootctl"
)

// BlockSize is the size of a grubenv file as grub-editenv creates it.
const BlockSize = 1024

// Signature starts every environment block.
const Signature = "# GRUB Environment Block\n"

// entry is one "name=value\n" line of a block.
type entry struct {
	name, value string
	start       int // first byte of the line
	valStart    int // first byte of the (escaped) value
	end         int // the line's '\n'
}

// findNextLine mirrors GRUB's find_next_line: a backslash escapes the next byte.
func findNextLine(buf []byte, p int) int {
	for p < len(buf) {
		if buf[p] == '\\' {
			p += 2
		} else if buf[p] == '\n' {
			break
		} else {
			p++
		}
	}
	return p + 1
}

// cString cuts s at a NUL, as GRUB's C strings end there.
func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// iterate walks a block as GRUB's grub_envblk_iterate (and so load_env and
// grub-editenv list) does: after the signature, lines starting with '#' are
// comments; a line is name, '=', and a value in which '\' escapes the next byte,
// up to '\n'. GRUB silently stops at the first line it cannot parse; broken is
// that line's offset, or -1 when the whole block parsed.
func iterate(buf []byte) (entries []entry, broken int, err error) {
	if !bytes.HasPrefix(buf, []byte(Signature)) {
		return nil, -1, fmt.Errorf("%w: no %q signature", bootctl.ErrBadEnv, strings.TrimSpace(Signature))
	}
	pend := len(buf)
	for p := len(Signature); p < pend; {
		if buf[p] == '#' {
			p = findNextLine(buf, p)
			continue
		}
		start := p
		for p < pend && buf[p] != '=' {
			p++
		}
		if p == pend {
			return entries, start, nil
		}
		nameEnd := p
		p++
		valStart := p
		p = valueEnd(buf, p)
		if p >= pend {
			return entries, start, nil
		}
		var v []byte
		for i := valStart; i < p; i++ {
			if buf[i] == '\\' {
				i++
			}
			v = append(v, buf[i])
		}
		entries = append(entries, entry{name: cString(buf[start:nameEnd]), value: cString(v), start: start, valStart: valStart, end: p})
		p++
	}
	return entries, -1, nil
}

// ParseEnv decodes a grubenv block. It reads what GRUB's load_env and
// `grub-editenv list` read (a later duplicate wins), but where GRUB silently stops
// at a malformed line this returns an error wrapping bootctl.ErrBadEnv, as it does
// for a missing signature.
func ParseEnv(buf []byte) (map[string]string, error) {
	entries, broken, err := iterate(buf)
	if err != nil {
		return nil, err
	}
	if broken >= 0 {
		return nil, fmt.Errorf("%w: malformed line at offset %d", bootctl.ErrBadEnv, broken)
	}
	return toMap(entries), nil
}

func toMap(entries []entry) map[string]string {
	m := make(map[string]string, len(entries))
	for _, e := range entries {
		m[e.name] = e.value
	}
	return m
}

// escape writes a value the way grub-editenv does: '\' and newline get a '\'.
func escape(v string) string {
	if !strings.ContainsAny(v, "\\\n") {
		return v
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] == '\\' || v[i] == '\n' {
			b.WriteByte('\\')
		}
		b.WriteByte(v[i])
	}
	return b.String()
}

// checkVar rejects what a block cannot carry back unchanged.
func checkVar(name, value string) error {
	if name == "" || strings.ContainsAny(name, "=\n\x00") || name[0] == '#' {
		return fmt.Errorf("variable name %q: must be non-empty, not start with '#', without '=', newline or NUL", name)
	}
	if strings.ContainsRune(value, 0) {
		return fmt.Errorf("variable %s: value contains NUL", name)
	}
	return nil
}

// EncodeEnv builds a fresh 1024-byte block: the signature, the variables sorted by
// name, '#' padding. It fails when they do not fit.
func EncodeEnv(vars map[string]string) ([]byte, error) {
	names, err := checkedNames(vars)
	if err != nil {
		return nil, err
	}
	content := []byte(Signature)
	for _, k := range names {
		content = append(content, k+"="+escape(vars[k])+"\n"...)
	}
	return pad(content)
}

func pad(content []byte) ([]byte, error) {
	if len(content) > BlockSize {
		return nil, fmt.Errorf("variables need %d bytes, the environment block holds %d", len(content), BlockSize)
	}
	buf := make([]byte, BlockSize)
	copy(buf, content)
	for i := len(content); i < BlockSize; i++ {
		buf[i] = '#'
	}
	return buf, nil
}

// freeSpace is where the free space ('#' padding) starts: after the last line
// that GRUB reads as a variable or as a comment ended by a newline. A comment
// that runs to the end of the block is padding (nothing GRUB reads is in it), and
// a torn tail (a line GRUB cannot parse) is dropped, so the next write cleans it.
func freeSpace(buf []byte) int {
	pend := len(buf)
	p := len(Signature)
	for p < pend {
		if buf[p] == '#' {
			next := findNextLine(buf, p)
			if next >= pend {
				return p
			}
			p = next
			continue
		}
		q := p
		for q < pend && buf[q] != '=' {
			q++
		}
		q = valueEnd(buf, q)
		if q >= pend {
			return p
		}
		p = q + 1
	}
	return min(p, pend)
}

// updateBlock sets vars in an existing block in place, as grub-editenv and GRUB's
// save_env do: a variable that exists keeps its line (every duplicate is updated,
// since the last one wins on reading), a new one is appended before the padding,
// everything else (other variables, comments) stays byte for byte. Values of
// unchanged length therefore rewrite only their own bytes, which keeps a torn
// write of the block small.
func updateBlock(buf []byte, vars map[string]string) ([]byte, error) {
	entries, _, err := iterate(buf)
	if err != nil {
		return nil, err
	}
	content := slices.Clone(buf[:freeSpace(buf)])
	names, err := checkedNames(vars)
	if err != nil {
		return nil, err
	}
	for _, k := range names {
		val := escape(vars[k])
		found := false
		// Replace from the last line backwards so earlier offsets stay valid.
		for i := len(entries) - 1; i >= 0; i-- {
			e := entries[i]
			if e.name != k || e.end > len(content) {
				continue
			}
			found = true
			content = slices.Concat(content[:e.valStart], []byte(val), content[e.end:])
		}
		if !found {
			content = append(content, k+"="+val+"\n"...)
		}
		// Offsets moved; re-read the lines before the next variable.
		if entries, _, err = iterate(content); err != nil {
			return nil, err
		}
	}
	return pad(content)
}

// valueEnd returns the index of the newline ending the value that starts at
// p (a backslash escapes the next byte), or len(buf) and beyond when none does.
func valueEnd(buf []byte, p int) int {
	for p < len(buf) && buf[p] != '\n' {
		if buf[p] == '\\' {
			p += 2
		} else {
			p++
		}
	}
	return p
}

// checkedNames checks every variable and returns the names sorted, the order
// they are written in.
func checkedNames(vars map[string]string) ([]string, error) {
	names := make([]string, 0, len(vars))
	for k, v := range vars {
		if err := checkVar(k, v); err != nil {
			return nil, err
		}
		names = append(names, k)
	}
	slices.Sort(names)
	return names, nil
}
